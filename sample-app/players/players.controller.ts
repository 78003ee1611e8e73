import { BadRequestException, Body, Controller, Get, Inject, Post } from '@nestjs/common';
import { OUTBOX_STORE, OutboxDispatcher, OutboxStore } from 'nestjs-outbox';
import { PlayersService } from './players.service';

@Controller()
export class PlayersController {
  constructor(
    private readonly players: PlayersService,
    private readonly dispatcher: OutboxDispatcher,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
  ) {}

  @Post('players')
  create(@Body() body: { name?: unknown }) {
    if (typeof body?.name !== 'string' || body.name.trim().length === 0 || body.name.length > 100) {
      throw new BadRequestException('name: expected a non-empty string of at most 100 characters');
    }
    return this.players.create(body.name.trim());
  }

  @Get('players')
  list() {
    return this.players.list();
  }

  @Get('outbox-stats')
  async stats() {
    return { store: await this.store.stats(), dispatcher: this.dispatcher.stats() };
  }
}
