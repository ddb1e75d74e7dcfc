// Frame codec shared by the runtime process: 4-byte big-endian length, then
// that many bytes of UTF-8 JSON. Bytes inside frames travel as base64 fields.
const MAX_FRAME = 64 * 1024 * 1024;

// The frame's bytes, or null if it would exceed MAX_FRAME (the reader on the
// other side would have to skip it; the writer decides what to do instead).
export function encodeFrame(message) {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  if (body.length > MAX_FRAME) return null;
  const head = Buffer.allocUnsafe(4);
  head.writeUInt32BE(body.length, 0);
  return Buffer.concat([head, body]);
}

// Returns a 'data' listener that calls onFrame(object) once per whole frame.
export function createFrameReader(onFrame) {
  let buffered = Buffer.alloc(0);
  return (chunk) => {
    buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
    while (buffered.length >= 4) {
      const size = buffered.readUInt32BE(0);
      if (size > MAX_FRAME) throw new Error(`frame of ${size} bytes exceeds ${MAX_FRAME}`);
      if (buffered.length < 4 + size) break;
      const body = buffered.subarray(4, 4 + size);
      buffered = buffered.subarray(4 + size);
      onFrame(JSON.parse(body.toString('utf8')));
    }
  };
}
