// web/codec.js: the uplink OpusHead's pre-skip, taken from the encoder's own head (the codecs need a browser).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { preSkipOf } from '../../web/codec.js';
import { opusHead } from '../../web/ogg.js';

const meta = (description) => ({ decoderConfig: { description } });

test('pre-skip is stated in 48 kHz samples whatever rate the encoder counts in', () => {
  // Chrome's AudioEncoder at 24 kHz: 156 input-rate samples of lookahead, 312 at 48 kHz (RFC 7845 §5.1).
  assert.equal(preSkipOf(meta(opusHead({ preSkip: 156, inputRate: 24000 }).buffer)), 312);
  assert.equal(preSkipOf(meta(opusHead({ preSkip: 312, inputRate: 48000 }))), 312);
  assert.equal(preSkipOf(meta(opusHead({ preSkip: 52, inputRate: 8000 }))), 312);
  assert.equal(preSkipOf({}), 312);
  assert.equal(preSkipOf(meta(new Uint8Array(19))), 312); // not an OpusHead
});
