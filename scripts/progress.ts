// A progress line for long scripts: redrawn in place on a terminal, every 10% otherwise.
export function progressLine(unit: string): (done: number, total: number, extra?: string) => void {
  let lastShare = -1;
  return (done, total, extra = '') => {
    const share = total === 0 ? 1 : done / total;
    if (process.stderr.isTTY) {
      const filled = Math.round(share * 30);
      process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(30 - filled)}] ${done}/${total} ${unit}${extra ? ` ${extra}` : ''}${done === total ? '\n' : ''}`);
      return;
    }
    const tenth = Math.floor(share * 10);
    if (tenth !== lastShare || done === total) {
      lastShare = tenth;
      process.stderr.write(`${done}/${total} ${unit}${extra ? ` ${extra}` : ''}\n`);
    }
  };
}
