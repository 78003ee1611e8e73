import { Controller, Logger } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { EntityManager } from 'typeorm';
import { Inbox, InboxManager } from 'nestjs-outbox';
import type { OutboxRelayMessage } from 'nestjs-outbox';
import type { PlayerCreated } from '../players/players.service';
import { PlayerCard } from './player-card.entity';

/**
 * The consumer side: each relayed message carries the event id as `id`, which `@Inbox()` reads by
 * default, so a message the relay re-publishes (after a crash between the broker's confirmation
 * and the outbox ack) is applied once. Its writes go through the inbox transaction.
 */
@Controller()
export class PlayerEventsController {
  private readonly logger = new Logger(PlayerEventsController.name);

  @EventPattern('player.created')
  @Inbox()
  async created(
    @Payload() message: OutboxRelayMessage<PlayerCreated>,
    @InboxManager() manager: EntityManager,
  ): Promise<void> {
    const { playerId, name } = message.payload;
    await manager.save(manager.create(PlayerCard, { playerId, name, score: 0 }));
    this.logger.log(`card for ${name} (event ${message.id})`);
  }

  @EventPattern('player.scored')
  @Inbox()
  async scored(
    @Payload() message: OutboxRelayMessage<{ playerId: string; points: number }>,
    @InboxManager() manager: EntityManager,
  ): Promise<void> {
    // Adds rather than copies the total: only correct because @Inbox() applies each message once.
    await manager.increment(
      PlayerCard,
      { playerId: message.payload.playerId },
      'score',
      message.payload.points,
    );
  }
}
