import { Injectable, Logger } from '@nestjs/common';
import { OutboxEvent, OutboxHandler, OutboxHandlerContext } from 'nestjs-outbox';
import type { PlayerCreated } from './players.service';

/** Runs once per committed `player.created`, retried with backoff if it throws. */
@Injectable()
export class WelcomeHandler {
  private readonly logger = new Logger(WelcomeHandler.name);
  readonly welcomed: string[] = [];

  @OutboxHandler('player.created', { maxAttempts: 5 })
  async welcome(event: OutboxEvent<PlayerCreated>, ctx: OutboxHandlerContext): Promise<void> {
    this.welcomed.push(event.payload.name);
    this.logger.log(`Welcome, ${event.payload.name}! (event ${event.id}, attempt ${ctx.attempt})`);
  }

  @OutboxHandler('player.scored')
  announce(event: OutboxEvent<{ playerId: string; points: number; score: number }>): void {
    this.logger.log(
      `Player ${event.payload.playerId} scored ${event.payload.points} (now ${event.payload.score})`,
    );
  }
}
