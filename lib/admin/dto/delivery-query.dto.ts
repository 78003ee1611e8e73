import { Type } from 'class-transformer';
import { IsIn, IsInt, IsString, Length, Max, MaxLength, Min } from 'class-validator';
import { DeliveryListState } from '../../interfaces/outbox-store.interface';
import { OUTBOX_ADMIN_PAGE_SIZE_CEILING } from '../outbox-admin.constants';
import { IsOptionalNotNull } from './admin-field.decorators';

export const DELIVERY_LIST_STATES: readonly DeliveryListState[] = [
  'retrying',
  'scheduled',
  'leased',
];

/** Query of `GET deliveries`: a state, optional type and handler, a keyset page. */
export class DeliveryQueryDto {
  @IsIn(DELIVERY_LIST_STATES, { message: 'state must be one of retrying, scheduled, leased' })
  state!: DeliveryListState;

  @IsOptionalNotNull()
  @IsString()
  @Length(1, 255)
  type?: string;

  @IsOptionalNotNull()
  @IsString()
  @Length(1, 255)
  handler?: string;

  /** Page size; the per-module `limits.maxPageSize` is checked by the service. */
  @IsOptionalNotNull()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(OUTBOX_ADMIN_PAGE_SIZE_CEILING)
  limit?: number;

  @IsOptionalNotNull()
  @IsString()
  @MaxLength(512)
  cursor?: string;
}

/** Query of `GET events`: the ordering key, a keyset page. */
export class EventQueryDto {
  @IsString({ message: 'key must be a string (the ordering key to list events of)' })
  @Length(1, 512)
  key!: string;

  @IsOptionalNotNull()
  @Type(() => Number)
  @IsInt()
  @Min(1)
  @Max(OUTBOX_ADMIN_PAGE_SIZE_CEILING)
  limit?: number;

  @IsOptionalNotNull()
  @IsString()
  @MaxLength(512)
  cursor?: string;
}
