import { ConflictException, Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { OutboxService } from 'nestjs-outbox';
import { Player } from './player.entity';

export interface PlayerCreated {
  playerId: string;
  name: string;
}

@Injectable()
export class PlayersService {
  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
  ) {}

  /** The player row and the `player.created` event commit together, or not at all. */
  async create(name: string): Promise<Player> {
    const existing = await this.dataSource.getRepository(Player).findOneBy({ name });
    if (existing) throw new ConflictException(`player "${name}" already exists`);
    return this.dataSource.transaction(async (manager) => {
      const player = await manager.save(manager.create(Player, { name }));
      await this.outbox.append<PlayerCreated>(
        { type: 'player.created', key: player.id, payload: { playerId: player.id, name } },
        { manager },
      );
      return player;
    });
  }

  list(): Promise<Player[]> {
    return this.dataSource.getRepository(Player).find({ order: { createdAt: 'ASC' } });
  }
}
