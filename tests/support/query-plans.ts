/**
 * The plans Postgres really uses inside the SQL functions, captured with auto_explain: every
 * statement a function runs (log_nested_statements), as JSON, delivered to the client as a NOTICE.
 * The checker then says which of them read a big table whole (a Seq Scan) instead of through an
 * index: at a few hundred thousand rows that is the difference between flat and growing cost.
 */

/** A node of EXPLAIN's JSON format (the fields used here). */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Filter?: string;
  Plans?: PlanNode[];
  [field: string]: unknown;
}

export interface CapturedPlan {
  /** What the workload was doing (the caller's label). */
  step: string;
  /** The statement's text as the function runs it. */
  query: string;
  plan: PlanNode;
}

/**
 * Connection options (startup parameters, so nothing runs before the first query) that make a
 * session report the plan of every statement, nested ones included, as JSON in a NOTICE. Loading
 * a library at session start takes a superuser, as the tests' server user is.
 */
export function autoExplainOptions(more: Record<string, string> = {}): string {
  const settings = {
    session_preload_libraries: 'auto_explain',
    'auto_explain.log_min_duration': '0',
    'auto_explain.log_nested_statements': 'on',
    'auto_explain.log_format': 'json',
    'auto_explain.log_level': 'notice',
    client_min_messages: 'notice',
    ...more,
  };
  return Object.entries(settings).map(([name, value]) => `-c ${name}=${value}`).join(' ');
}

/** The plan in one auto_explain NOTICE ("duration: 0.123 ms  plan:\n{...}"), or null for any other notice. */
export function parseAutoExplainNotice(message: string): { query: string; plan: PlanNode } | null {
  const start = message.indexOf('{');
  if (!message.startsWith('duration:') || start < 0) return null;
  const parsed = JSON.parse(message.slice(start)) as { 'Query Text'?: string; Plan?: PlanNode };
  if (!parsed.Plan) return null;
  return { query: (parsed['Query Text'] ?? '').replace(/\s+/g, ' ').trim(), plan: parsed.Plan };
}

/** Every node of a plan, depth first. */
export function planNodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(planNodes)];
}

/** A relation a plan reads whole: its table (or partition), and the index it walks, if any. */
export interface WholeRead {
  relation: string;
  index?: string;
}

/**
 * What a plan reads whole: a sequential scan reads the table; an index scan with no condition to
 * look up by reads every entry of its index (all rows, or a partial index's few), unless a Limit
 * above it stops it early.
 */
export function wholeReads(plan: PlanNode, limited = false): WholeRead[] {
  const node = plan['Node Type'];
  const relation = plan['Relation Name'];
  const here: WholeRead[] = !relation ? []
    : /Seq Scan$/.test(node) ? [{ relation }]
    : /^Index (Only )?Scan$/.test(node) && !plan['Index Cond'] && !limited ? [{ relation, index: plan['Index Name'] }]
    : [];
  return [...here, ...(plan.Plans ?? []).flatMap((child) => wholeReads(child, limited || node === 'Limit'))];
}

/** A plan as an indented outline: node, relation, index, and the condition it looks up by. */
export function planOutline(plan: PlanNode, depth = 0): string {
  const node = plan['Node Type'];
  const parts = [
    node,
    plan['Relation Name'] ? `on ${plan['Relation Name']}` : '',
    plan['Index Name'] ? `using ${plan['Index Name']}` : '',
    plan['Index Cond'] ? `(${plan['Index Cond']})` : '',
    plan.Filter ? `filter ${plan.Filter}` : '',
  ].filter(Boolean);
  return [`${'  '.repeat(depth)}${parts.join(' ')}`, ...(plan.Plans ?? []).map((child) => planOutline(child, depth + 1))].join('\n');
}

export interface RelationSize {
  /** The table a partition or an index belongs to (a partition's: its partitioned table). */
  table: string;
  /** Rows (an index: its entries, a partial index's only the rows it covers). */
  rows: number;
}

/** Rows of every table, partition and index in `public`, as VACUUM and ANALYZE counted them, by name. */
export async function relationSizes(sql: (text: string) => Promise<Record<string, unknown>[]>): Promise<Map<string, RelationSize>> {
  const rows = await sql(`
    select c.relname,
      case when c.relkind = 'i' then coalesce(indexed_parent.relname, indexed.relname) else coalesce(parent.relname, c.relname) end as "table",
      greatest(c.reltuples, 0)::bigint as rows
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    left join pg_inherits i on i.inhrelid = c.oid and c.relkind <> 'i'
    left join pg_class parent on parent.oid = i.inhparent
    left join pg_index x on x.indexrelid = c.oid
    left join pg_class indexed on indexed.oid = x.indrelid
    left join pg_inherits ii on ii.inhrelid = indexed.oid
    left join pg_class indexed_parent on indexed_parent.oid = ii.inhparent
    where n.nspname = 'public' and c.relkind in ('r', 'p', 'i')`);
  return new Map(rows.map((row) => [String(row.relname), { table: String(row.table), rows: Number(row.rows) }]));
}

export interface Violation {
  step: string;
  query: string;
  /** The big relations the plan reads whole, with their rows. */
  relations: string[];
  outline: string;
}

/**
 * The plans that read a big relation whole, one entry per statement (the first time it was seen). A relation is big when its table is one of `bigTables` and it holds at least
 * `minRows` rows (an empty partition, or a table of a few pages, is read whole at no cost, and the
 * planner rightly does). `allowed` exempts a scan on purpose.
 */
export function findSequentialScans(
  plans: CapturedPlan[],
  sizes: Map<string, RelationSize>,
  options: { bigTables: readonly string[]; minRows: number; allowed?: (plan: CapturedPlan, relation: string) => boolean },
): Violation[] {
  const violations = new Map<string, Violation>();
  for (const captured of plans) {
    const reads = wholeReads(captured.plan).filter(({ relation, index }) => {
      // What is read: the table, or the whole of the index walked (a partial index covers few rows).
      const size = sizes.get(index ?? relation);
      return size && options.bigTables.includes(size.table) && size.rows >= options.minRows && !options.allowed?.(captured, relation);
    });
    if (reads.length === 0 || violations.has(captured.query)) continue;
    violations.set(captured.query, {
      step: captured.step,
      query: captured.query,
      relations: reads.map(({ relation, index }) => `${relation}${index ? ` (every entry of ${index})` : ''} (${sizes.get(index ?? relation)!.rows} rows)`),
      outline: planOutline(captured.plan),
    });
  }
  return [...violations.values()];
}

/** The distinct (statement, plan shape) pairs, for a readable report. */
export function distinctPlans(plans: CapturedPlan[]): (CapturedPlan & { outline: string; times: number })[] {
  const seen = new Map<string, CapturedPlan & { outline: string; times: number }>();
  for (const captured of plans) {
    const outline = planOutline(captured.plan);
    const key = `${captured.query}\n${outline.replace(/\(.*\)/g, '')}`;
    const entry = seen.get(key);
    if (entry) entry.times++;
    else seen.set(key, { ...captured, outline, times: 1 });
  }
  return [...seen.values()];
}
