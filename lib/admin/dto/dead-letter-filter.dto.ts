import { IsString, Length } from 'class-validator';
import { IsAdminDate, IsOptionalNotNull } from './admin-field.decorators';

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

  /** Name of the last error, exact match (as the summary reports it). */
  @IsOptionalNotNull()
  @IsString()
  @Length(1, 255)
  errorName?: string;

  /**
   * Fingerprint of the last error's message, exact match (as the summary reports it: numbers
   * and ids masked). The empty fingerprint is that of an empty message.
   */
  @IsOptionalNotNull()
  @IsString()
  @Length(0, 255)
  fingerprint?: string;

  /** Dead-lettered strictly before this time. */
  @IsOptionalNotNull()
  @IsAdminDate()
  failedBefore?: Date;

  /** Dead-lettered at or after this time. */
  @IsOptionalNotNull()
  @IsAdminDate()
  failedAfter?: Date;
}
