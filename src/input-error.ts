// The one base class of bad input, whatever the entry point: the business API (an unknown kind, an
// invalid due time), flow controls (a cap out of range), operator actions (an empty selector, an
// unknown kind). Nothing was changed. The CLI answers it with its message and exit 2; the console
// with 400 and the message.
export class InputError extends Error {
  override name = 'InputError';
}
