/**
 * The claim loop's state and every transition of it, without I/O: each decision to claim again —
 * after a wake-up, when a claim comes back full, when a slot frees, when written outcomes make
 * room or free a key — is a case of `next`. `ClaimScheduler` (claim-scheduler.ts) feeds it events
 * and carries out its actions; whether a claim may start at all (backoff, claims in flight, free
 * slots) is the scheduler's `claim`.
 */

/** Why a claim is owed before the next poll tick. Several may hold at once. */
export interface Owed {
  /**
   * A wake-up (a commit here or elsewhere) not yet served by a claim started after it. While a
   * claim is in flight or no slot is free it waits here, so a burst of wake-ups costs one claim
   * round when capacity frees, never a queue of polls.
   */
  readonly wake: boolean;
  /** The last claim came back full: more is waiting. */
  readonly more: boolean;
  /** A claim was skipped because too many outcomes wait to be written. */
  readonly outcomes: boolean;
  /**
   * An outcome that ends a keyed delivery (ack, dead letter) was written and no claim started
   * since: the next event of that key may be claimable now, and nothing else signals it (a
   * claim can take only the head of each key, so a keyed backlog comes back short while its
   * heads run). Served as a wake-up is — one claim, once no claim is in flight — so the outcomes
   * written together cost one claim, and a claim that finds nothing owes nothing more.
   */
  readonly freed: boolean;
}

/** Where the claim loop is. */
export type ClaimLoopState =
  /** Not started, or stopping: nothing is claimed. Pausing before a start still counts. */
  | { readonly kind: 'stopped'; readonly paused: boolean }
  /** Started, but `pause()`d: running handlers finish, nothing new is claimed. */
  | { readonly kind: 'paused'; readonly owed: Owed }
  | { readonly kind: 'claiming'; readonly owed: Owed };

/** What happened. The claim loop's state changes only through these (see `next`). */
export type ClaimLoopEvent =
  | 'start'
  | 'stop'
  | 'pause'
  | 'resume'
  /** A commit here or a signal from another process: there may be new work. */
  | 'wake'
  /** A claim of the loop left for the store: it reads after every wake-up so far. */
  | 'claim-started'
  /** Any claim (the loop's or `drain`'s) came back with as many deliveries as it asked for. */
  | 'claimed-full'
  | 'claimed-short'
  /** A claim of the loop is over and its slots are no longer reserved. */
  | 'claim-settled'
  | 'claim-settled-full'
  /** A claim was skipped: too many outcomes wait to be written. */
  | 'held-back'
  /** An outcome was written and the backlog is within bounds again. */
  | 'backlog-ok'
  /** An outcome that ends a keyed delivery (ack, dead letter) was written (see `Owed.freed`). */
  | 'key-freed'
  /** A handler slot freed. */
  | 'slot-freed';

/** What the loop does about an event. */
export type ClaimLoopAction =
  /** Try one claim now. */
  | 'claim'
  /** One claim now, if a wake-up or a freed key is still owed and no claim is in flight. */
  | 'serve-owed'
  /** `serve-owed` on the next turn (once, however many asked in this one). */
  | 'queue-owed'
  /** On the next turn, claim as often as the free slots allow (as many separate polls would). */
  | 'queue-more'
  | null;

export interface ClaimTransition {
  readonly state: ClaimLoopState;
  readonly action: ClaimLoopAction;
}

const NOTHING_OWED: Owed = { wake: false, more: false, outcomes: false, freed: false };

/**
 * Every transition of the claim loop, without I/O. Whether a claim may start at all (backoff,
 * claims in flight, free slots) is `ClaimScheduler.claim`'s: the state says what is owed.
 */
export function next(state: ClaimLoopState, event: ClaimLoopEvent): ClaimTransition {
  if (state.kind === 'stopped') {
    switch (event) {
      case 'start':
        return to(
          state.paused
            ? { kind: 'paused', owed: NOTHING_OWED }
            : { kind: 'claiming', owed: NOTHING_OWED },
          'claim',
        );
      case 'pause':
        return to(state.paused ? state : { kind: 'stopped', paused: true });
      case 'resume':
        return to(state.paused ? { kind: 'stopped', paused: false } : state);
      default:
        // Wake-ups, claims (drain works while stopped) and outcomes change nothing here.
        return to(state);
    }
  }
  const { owed } = state;
  switch (event) {
    case 'start':
      return to(state);
    case 'stop':
      return to({ kind: 'stopped', paused: state.kind === 'paused' });
    case 'pause':
      return to({ kind: 'paused', owed });
    case 'resume':
      return to({ kind: 'claiming', owed }, 'claim');
    case 'wake':
      return to(owing(state, 'wake', true), 'queue-owed');
    case 'key-freed':
      return to(owing(state, 'freed', true), 'queue-owed');
    case 'claim-started':
      // It reads after every wake-up and every outcome written so far.
      return to(owing(owing(state, 'wake', false), 'freed', false));
    case 'claimed-full':
      return to(owing(state, 'more', true));
    case 'claimed-short':
      return to(owing(state, 'more', false));
    case 'claim-settled-full':
      // A full batch means more is waiting: claim again at once, not on the next tick.
      return to(state, 'queue-more');
    case 'claim-settled':
      // A wake-up or a freed key that came while the claim was out may have missed it: serve it
      // now.
      return to(state, owed.wake || owed.freed ? 'queue-owed' : null);
    case 'held-back':
      return to(owing(state, 'outcomes', true));
    case 'backlog-ok':
      // A claim held back by unwritten outcomes goes as soon as they are written.
      return owed.outcomes ? to(owing(state, 'outcomes', false), 'queue-more') : to(state);
    case 'slot-freed':
      // Work was left behind when the last claim came back full: fetch it now, not next tick.
      // Otherwise this is the free slot a pending wake-up or freed key waited for.
      return to(state, owed.more ? 'queue-more' : owed.wake || owed.freed ? 'serve-owed' : null);
  }
}

type Started = Exclude<ClaimLoopState, { kind: 'stopped' }>;

function to(state: ClaimLoopState, action: ClaimLoopAction = null): ClaimTransition {
  return { state, action };
}

/** `state` with one reason owed or not (the same object when nothing changes). */
function owing(state: Started, reason: keyof Owed, value: boolean): Started {
  if (state.owed[reason] === value) return state;
  return { kind: state.kind, owed: { ...state.owed, [reason]: value } };
}
