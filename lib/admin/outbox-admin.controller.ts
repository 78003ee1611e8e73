import {
  BadRequestException,
  Body,
  Controller,
  Delete,
  Get,
  HttpCode,
  HttpStatus,
  Param,
  ParseUUIDPipe,
  Post,
  Query,
  Type,
  UseFilters,
  UseGuards,
  UsePipes,
} from '@nestjs/common';
import { DeadLetter, OutboxStoreStats } from '../interfaces/outbox-store.interface';
import { DeadLetterFilterDto } from './dto/dead-letter-filter.dto';
import { DeadLetterQueryDto } from './dto/dead-letter-query.dto';
import { DeliveryQueryDto, EventQueryDto } from './dto/delivery-query.dto';
import {
  PurgeDeadLettersDto,
  ReplayDeadLetterDto,
  ReplayDeadLettersDto,
} from './dto/dead-letter-bulk.dto';
import { OutboxAdminAuthGuard } from './outbox-admin-auth.guard';
import { OutboxAdminBodyLimitGuard } from './outbox-admin-body-limit.guard';
import { OutboxAdminContentTypeGuard } from './outbox-admin-content-type.guard';
import { OutboxAdminExceptionFilter } from './outbox-admin-exception.filter';
import { OutboxAdminValidationPipe } from './outbox-admin-validation.pipe';
import {
  CatalogResponse,
  DeadLetterListResponse,
  DeadLetterSummaryResponse,
  DeliveryListResponse,
  EventListResponse,
  OutboxAdminService,
  ThroughputResponse,
} from './outbox-admin.service';
import { AdminEventDetail } from './outbox-admin-views';

const uuid = new ParseUUIDPipe({
  exceptionFactory: () => new BadRequestException('id must be a UUID'),
});

const eventUuid = new ParseUUIDPipe({
  exceptionFactory: () => new BadRequestException('id must be a UUID (an event id)'),
});

/**
 * Dead letters, deliveries, events and stats over HTTP. Mounted only through `OutboxAdminModule.register()`, which
 * subclasses it with the configured path; the pipe, filter and guards here never depend on what the
 * application configured globally.
 */
@Controller()
@UseGuards(OutboxAdminAuthGuard, OutboxAdminContentTypeGuard, OutboxAdminBodyLimitGuard)
@UseFilters(OutboxAdminExceptionFilter)
@UsePipes(new OutboxAdminValidationPipe())
export class OutboxAdminController {
  constructor(private readonly admin: OutboxAdminService) {}

  /** Keyset-paged dead letters, oldest first, without payload and headers. */
  @Get('dead-letters')
  list(@Query() query: DeadLetterQueryDto): Promise<DeadLetterListResponse> {
    return this.admin.list(query);
  }

  // Declared before `dead-letters/:id` so "summary" is not taken for an id.
  /** Counts grouped by type, handler, error name and message fingerprint. */
  @Get('dead-letters/summary')
  summary(@Query() filter: DeadLetterFilterDto): Promise<DeadLetterSummaryResponse> {
    return this.admin.summary(filter);
  }

  /** One dead letter with payload, headers and error history. */
  @Get('dead-letters/:id')
  get(@Param('id', uuid) id: string): Promise<DeadLetter> {
    return this.admin.get(id);
  }

  @Post('dead-letters/replay')
  @HttpCode(HttpStatus.OK)
  replayMany(@Body() body: ReplayDeadLettersDto): Promise<{ replayed: number }> {
    const { availableAt, ...selection } = body;
    return this.admin.replay(selection, availableAt);
  }

  @Post('dead-letters/purge')
  @HttpCode(HttpStatus.OK)
  purgeMany(@Body() body: PurgeDeadLettersDto): Promise<{ purged: number }> {
    return this.admin.purge(body);
  }

  @Post('dead-letters/:id/replay')
  @HttpCode(HttpStatus.OK)
  replayOne(
    @Param('id', uuid) id: string,
    @Body() body: ReplayDeadLetterDto,
  ): Promise<{ replayed: number }> {
    return this.admin.replayOne(id, body.availableAt);
  }

  @Delete('dead-letters/:id')
  purgeOne(@Param('id', uuid) id: string): Promise<{ purged: number }> {
    return this.admin.purgeOne(id);
  }

  /** Store-wide counts: pending, due, leased, dead, oldest pending age, per type. */
  @Get('stats')
  stats(): Promise<OutboxStoreStats> {
    return this.admin.stats();
  }

  /** Open deliveries in one state (retrying, scheduled, leased), keyset-paged. */
  @Get('deliveries')
  deliveries(@Query() query: DeliveryQueryDto): Promise<DeliveryListResponse> {
    return this.admin.deliveries(query);
  }

  /** The events of one ordering key, newest first, with each handler's state. */
  @Get('events')
  events(@Query() query: EventQueryDto): Promise<EventListResponse> {
    return this.admin.events(query);
  }

  /** One event with its state for every handler and each delivery's error history. */
  @Get('events/:id')
  event(@Param('id', eventUuid) id: string): Promise<AdminEventDetail> {
    return this.admin.event(id);
  }

  /** Event types and handlers, for pickers. */
  @Get('catalog')
  catalog(): Promise<CatalogResponse> {
    return this.admin.catalog();
  }

  /** Per handler: due backlog and this process's outcomes per minute over the last hour. */
  @Get('throughput')
  throughput(): Promise<ThroughputResponse> {
    return this.admin.throughput();
  }
}

/**
 * A controller class mounted at `path`. Each registration gets its own subclass, so two admin
 * modules (say, one per RouterModule branch) never share route metadata.
 */
export function createOutboxAdminController(path: string): Type<OutboxAdminController> {
  class MountedOutboxAdminController extends OutboxAdminController {}
  Controller(path)(MountedOutboxAdminController);
  Object.defineProperty(MountedOutboxAdminController, 'name', { value: 'OutboxAdminController' });
  return MountedOutboxAdminController;
}
