import {
  BadRequestException,
  Body,
  Controller,
  NotFoundException,
  Param,
  Post,
} from '@nestjs/common';
import { EntityManager } from 'typeorm';
import { Inbox, InboxManager, OutboxService } from 'nestjs-outbox';
import { Player } from './player.entity';

/**
 * `POST /players/:id/points` with an `Idempotency-Key` header: a retried request (same key) adds the
 * points once. The score update, the inbox record and the `player.scored` event commit together.
 */
@Controller('players')
export class PointsController {
  constructor(private readonly outbox: OutboxService) {}

  @Post(':id/points')
  @Inbox({ consumer: 'sample.add-points', duplicateResult: { status: 'duplicate' } })
  async addPoints(
    @Param('id') id: string,
    @Body() body: { points?: unknown },
    @InboxManager() manager: EntityManager,
  ): Promise<{ status: string; score: number }> {
    const points = body?.points;
    if (typeof points !== 'number' || !Number.isInteger(points) || points < 1 || points > 1000) {
      throw new BadRequestException('points: expected an integer from 1 to 1000');
    }
    const player = await manager.findOneBy(Player, { id });
    if (!player) throw new NotFoundException(`player ${id} not found`);
    player.score += points;
    await manager.save(player);
    await this.outbox.append(
      {
        type: 'player.scored',
        key: player.id,
        payload: { playerId: player.id, points, score: player.score },
      },
      { manager },
    );
    return { status: 'added', score: player.score };
  }
}
