import { Transform } from 'class-transformer';
import { IsDate, IsOptional, IsString, Length, isISO8601 } from 'class-validator';

/** ISO-8601 text to a Date; anything else is left as is for `@IsDate()` to reject. */
export const ToDate = () =>
  Transform(({ value }: { value: unknown }) =>
    typeof value === 'string' && isISO8601(value, { strict: true }) ? new Date(value) : value,
  );

const isoMessage = { message: '$property must be an ISO-8601 date-time' };

/** Which dead letters a query or bulk action selects. Every field narrows the selection. */
export class DeadLetterFilterDto {
  /** Event type, exact match. */
  @IsOptional()
  @IsString()
  @Length(1, 255)
  type?: string;

  /** Handler name, exact match. */
  @IsOptional()
  @IsString()
  @Length(1, 255)
  handler?: string;

  /** Ordering key, exact match. */
  @IsOptional()
  @IsString()
  @Length(1, 512)
  key?: string;

  /** Dead-lettered strictly before this time. */
  @IsOptional()
  @ToDate()
  @IsDate(isoMessage)
  failedBefore?: Date;

  /** Dead-lettered at or after this time. */
  @IsOptional()
  @ToDate()
  @IsDate(isoMessage)
  failedAfter?: Date;
}
