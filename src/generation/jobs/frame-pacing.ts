/**
 * The shared socket's flow control: frames are read a turn of the event loop at a time. A server that sends
 * faster than we read would otherwise keep the loop in its I/O phase (Node reads a busy socket up to 32 times
 * per turn): the msgs our nodes send (Node-RED delivers them in the next check phase), other flows, timers and
 * HTTP would wait behind thousands of frames. Apart from the socket manager because it is neither the
 * connection's life nor what the frames mean. No Node-RED inside.
 */
import type WebSocket from 'ws';

/** Frames read in one turn of the event loop before the socket pauses until the next turn. */
const FRAMES_PER_TURN = 400;

export class FramePacer {
  /** Frames read in this turn of the event loop (see FRAMES_PER_TURN). */
  private framesThisTurn = 0;

  /** Counts the turn's frames; past FRAMES_PER_TURN, pauses reading until the msgs queued so far are delivered. */
  pace(ws: WebSocket): void {
    this.framesThisTurn += 1;
    if (this.framesThisTurn === 1) setImmediate(() => (this.framesThisTurn = 0));
    else if (this.framesThisTurn === FRAMES_PER_TURN) {
      ws.pause();
      // Queued after what this turn's frames sent, so those go first.
      setImmediate(() => ws.resume());
    }
  }
}
