import { Column, Entity, PrimaryColumn } from 'typeorm';

/** The consumer's own read model: one card per player, kept from relayed events. */
@Entity('player_cards')
export class PlayerCard {
  @PrimaryColumn()
  playerId!: string;

  @Column()
  name!: string;

  @Column({ default: 0 })
  score!: number;
}
