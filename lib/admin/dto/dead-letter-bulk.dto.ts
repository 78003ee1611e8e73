import { Type } from 'class-transformer';
import {
  ArrayMaxSize,
  ArrayMinSize,
  IsArray,
  IsBoolean,
  IsObject,
  IsUUID,
  ValidateNested,
} from 'class-validator';
import { OUTBOX_ADMIN_MAX_IDS } from '../outbox-admin.constants';
import { IsAdminDate, IsOptionalNotNull } from './admin-field.decorators';
import { DeadLetterFilterDto } from './dead-letter-filter.dto';

/** Body of `POST dead-letters/purge`: exactly one of `ids` or `filter`. */
export class PurgeDeadLettersDto {
  @IsOptionalNotNull()
  @IsArray()
  @ArrayMinSize(1)
  @ArrayMaxSize(OUTBOX_ADMIN_MAX_IDS)
  @IsUUID('all', { each: true })
  ids?: string[];

  @IsOptionalNotNull()
  @IsObject()
  @ValidateNested()
  @Type(() => DeadLetterFilterDto)
  filter?: DeadLetterFilterDto;

  /** Must be `true` when `filter` has no criteria, i.e. selects every dead letter. */
  @IsOptionalNotNull()
  @IsBoolean()
  all?: boolean;
}

/** Body of `POST dead-letters/replay`. */
export class ReplayDeadLettersDto extends PurgeDeadLettersDto {
  /** When the replayed deliveries become due. @default now */
  @IsOptionalNotNull()
  @IsAdminDate()
  availableAt?: Date;
}

/** Body of `POST dead-letters/:id/replay` (optional). */
export class ReplayDeadLetterDto {
  /** When the replayed delivery becomes due. @default now */
  @IsOptionalNotNull()
  @IsAdminDate()
  availableAt?: Date;
}
