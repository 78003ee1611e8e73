import { IsDate, IsString, Length } from 'class-validator';
import { IsOptionalNotNull, ToDate } from './admin-field.decorators';

const isoMessage = { message: '$property must be an ISO-8601 date-time' };

/**
 * Which dead letters a query or bulk action selects. Every field narrows the selection; a field
 * is either left out or a real value (`null` is refused, never read as "any").
 */
export class DeadLetterFilterDto {
  /** Event type, exact match. */
  @IsOptionalNotNull()
  @IsString()
  @Length(1, 255)
  type?: string;

  /** Handler name, exact match. */
  @IsOptionalNotNull()
  @IsString()
  @Length(1, 255)
  handler?: string;

  /** Ordering key, exact match. */
  @IsOptionalNotNull()
  @IsString()
  @Length(1, 512)
  key?: string;

  /** Dead-lettered strictly before this time. */
  @IsOptionalNotNull()
  @ToDate()
  @IsDate(isoMessage)
  failedBefore?: Date;

  /** Dead-lettered at or after this time. */
  @IsOptionalNotNull()
  @ToDate()
  @IsDate(isoMessage)
  failedAfter?: Date;
}
