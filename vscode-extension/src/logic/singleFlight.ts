// One restart at a time. A trust grant and a settings change arriving together used to start
// two clients; now a request that comes while a restart runs makes exactly one more run after
// it (with the newest settings), and every caller waits for the run that covers its request.

export class SingleFlight {
  private running: Promise<void> | undefined;
  private again: Promise<void> | undefined;

  constructor(private readonly task: () => Promise<void>) {}

  /** Run the task; while it runs, further calls share one follow-up run. */
  run(): Promise<void> {
    if (!this.running) {
      this.running = this.task().finally(() => {
        this.running = undefined;
      });
      return this.running;
    }
    if (!this.again) {
      const current = this.running;
      this.again = current
        .catch(() => undefined)
        .then(() => {
          this.again = undefined;
          return this.run();
        });
    }
    return this.again;
  }

  get busy(): boolean {
    return this.running !== undefined;
  }
}
