// Progress display on stderr: one live status line on a terminal, a line every few seconds
// otherwise (CI logs), and permanent lines for results.
export class Status {
  private prefix = '';
  private last = '';
  private lastPrinted = 0;
  private readonly tty = Boolean(process.stderr.isTTY);
  private readonly started = Date.now();

  /** Starts a new step: "[3/12] burst · pg-boss (batch)". */
  step(prefix: string): void {
    this.clear();
    this.prefix = prefix;
    this.lastPrinted = 0;
  }

  set(text: string): void {
    const line = `${this.elapsed()} ${this.prefix}: ${text}`;
    if (line === this.last) return;
    this.last = line;
    if (this.tty) {
      const cols = process.stderr.columns || 120;
      process.stderr.write(`\r\x1b[K${line.slice(0, cols - 1)}`);
    } else if (Date.now() - this.lastPrinted > 5000) {
      this.lastPrinted = Date.now();
      process.stderr.write(`${line}\n`);
    }
  }

  /** A line that stays. */
  log(text: string): void {
    this.clear();
    process.stderr.write(`${this.elapsed()} ${text}\n`);
  }

  clear(): void {
    if (this.tty && this.last) process.stderr.write('\r\x1b[K');
    this.last = '';
  }

  private elapsed(): string {
    const s = Math.floor((Date.now() - this.started) / 1000);
    return `[${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}]`;
  }
}
