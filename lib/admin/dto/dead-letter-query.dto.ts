import { Type } from 'class-transformer';
import { IsInt, IsString, Max, MaxLength, Min } from 'class-validator';
import { OUTBOX_ADMIN_PAGE_SIZE_CEILING } from '../outbox-admin.constants';
import { IsOptionalNotNull } from './admin-field.decorators';
import { DeadLetterFilterDto } from './dead-letter-filter.dto';

/** Query of `GET dead-letters`: a filter plus a keyset page. */
export class DeadLetterQueryDto extends DeadLetterFilterDto {
  /** Page size; the per-module `limits.maxPageSize` is checked by the service. */
  @IsOptionalNotNull()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(OUTBOX_ADMIN_PAGE_SIZE_CEILING)
  limit?: number;

  /** `nextCursor` of the previous page. */
  @IsOptionalNotNull()
  @IsString()
  @MaxLength(512)
  cursor?: string;
}
