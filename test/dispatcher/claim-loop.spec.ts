import {
  ClaimLoopEvent,
  ClaimLoopState,
  ClaimTransition,
  next,
} from '../../lib/dispatcher/claim-loop';

/** Runs `events` from `state`; returns the last transition and every action on the way. */
function run(state: ClaimLoopState, ...events: ClaimLoopEvent[]) {
  const actions: ClaimTransition['action'][] = [];
  let last: ClaimTransition = { state, action: null };
  for (const event of events) {
    last = next(last.state, event);
    actions.push(last.action);
  }
  return { state: last.state, actions };
}

const STOPPED: ClaimLoopState = { kind: 'stopped', paused: false };
const CLAIMING = next(STOPPED, 'start').state;

describe('claim loop transitions (next)', () => {
  it('claims at start, and not while stopped, whatever arrives', () => {
    expect(next(STOPPED, 'start').action).toBe('claim');
    const events: ClaimLoopEvent[] = ['wake', 'claimed-full', 'slot-freed', 'backlog-ok'];
    expect(run(STOPPED, ...events)).toEqual({ state: STOPPED, actions: [null, null, null, null] });
  });

  it('serves a wake-up on the next turn, once a claim started after it', () => {
    const woken = run(CLAIMING, 'wake');
    expect(woken.actions).toEqual(['queue-owed']);
    // A claim returning after the wake-up serves it again (it may have read before the commit).
    expect(next(woken.state, 'claim-settled').action).toBe('queue-owed');
    // A freed slot is what a wake-up waiting for capacity was waiting for.
    expect(next(woken.state, 'slot-freed').action).toBe('serve-owed');
    const served = run(woken.state, 'claim-started', 'claim-settled', 'slot-freed');
    expect(served.actions).toEqual([null, null, null]);
  });

  it('claims again at once after a full claim, on a freed slot, before a pending wake-up', () => {
    const full = run(CLAIMING, 'wake', 'claimed-full');
    expect(next(full.state, 'claim-settled-full').action).toBe('queue-more');
    expect(next(full.state, 'slot-freed').action).toBe('queue-more');
    expect(next(run(full.state, 'claimed-short').state, 'slot-freed').action).toBe('serve-owed');
  });

  it('lets a claim held back by unwritten outcomes go once, when they are written', () => {
    const held = run(CLAIMING, 'backlog-ok', 'held-back', 'backlog-ok', 'backlog-ok');
    expect(held.actions).toEqual([null, null, 'queue-more', null]);
  });

  it('claims once more after the outcomes of keyed deliveries are written, never in a loop', () => {
    // A keyed backlog's claim comes back short while its key heads run; their acks free the
    // keys' next events, and nothing else would claim them before the poll tick.
    const short = run(CLAIMING, 'claim-started', 'claimed-short', 'claim-settled');
    expect(short.actions).toEqual([null, null, null]);
    // A batch of acks (one event each) owes one claim, on the next turn.
    const freed = run(short.state, 'key-freed', 'key-freed', 'key-freed');
    expect(freed.actions).toEqual(['queue-owed', 'queue-owed', 'queue-owed']);
    expect(freed.state).toMatchObject({ owed: { freed: true } });
    // The claim that serves it reads after those acks; finding nothing, it owes nothing more.
    const served = run(freed.state, 'claim-started', 'claimed-short', 'claim-settled');
    expect(served.actions).toEqual([null, null, null]);
    expect(served.state).toEqual(short.state);
    expect(next(served.state, 'slot-freed').action).toBeNull();
  });

  it('serves a key freed while a claim was out after that claim, or on a freed slot', () => {
    const during = run(CLAIMING, 'claim-started', 'key-freed', 'claimed-short');
    expect(next(during.state, 'claim-settled').action).toBe('queue-owed');
    expect(next(during.state, 'slot-freed').action).toBe('serve-owed');
    // A full claim's successor claim covers it.
    const full = run(CLAIMING, 'key-freed', 'claimed-full');
    expect(next(full.state, 'slot-freed').action).toBe('queue-more');
  });

  it('frees no key while stopped, and keeps a freed key owed while paused', () => {
    expect(next(STOPPED, 'key-freed')).toEqual({ state: STOPPED, action: null });
    const paused = run(CLAIMING, 'pause', 'key-freed', 'resume');
    expect(paused.actions[2]).toBe('claim');
    expect(paused.state).toMatchObject({ kind: 'claiming', owed: { freed: true } });
  });

  it('keeps a claim held back by unwritten outcomes held while keys are freed', () => {
    // The scheduler's claim refuses while the backlog is over its bound ('held-back'): a freed
    // key asks for a claim, but only a backlog back within bounds lets the held claims go.
    const held = run(CLAIMING, 'held-back', 'key-freed');
    expect(held.actions).toEqual([null, 'queue-owed']);
    expect(held.state).toMatchObject({ owed: { outcomes: true, freed: true } });
    const ok = run(held.state, 'backlog-ok');
    expect(ok.actions).toEqual(['queue-more']);
    // The claim that goes serves the freed key too; after it, nothing is owed.
    const served = run(ok.state, 'claim-started', 'claimed-short', 'claim-settled', 'slot-freed');
    expect(served.actions).toEqual([null, null, null, null]);
    expect(served.state).toEqual(CLAIMING);
  });

  it('keeps a pause across stop and start, and claims on resume', () => {
    const paused = run(STOPPED, 'pause', 'start');
    expect(paused.state.kind).toBe('paused');
    const stopped = run(paused.state, 'stop');
    expect(stopped.state).toEqual({ kind: 'stopped', paused: true });
    expect(run(stopped.state, 'start', 'resume')).toEqual({
      state: {
        kind: 'claiming',
        owed: { wake: false, more: false, outcomes: false, freed: false },
      },
      actions: ['claim', 'claim'],
    });
  });

  it('keeps what is owed while paused', () => {
    const paused = run(CLAIMING, 'wake', 'pause', 'resume');
    expect(paused.state).toEqual({
      kind: 'claiming',
      owed: { wake: true, more: false, outcomes: false, freed: false },
    });
  });

  it('returns the same state object when nothing changes', () => {
    expect(next(CLAIMING, 'slot-freed').state).toBe(CLAIMING);
    expect(next(CLAIMING, 'claimed-short').state).toBe(CLAIMING);
  });
});
