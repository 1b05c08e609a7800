import Link from 'next/link';
import { connection } from 'next/server';
import { PROBLEM_CATALOG } from '#lib/http/problem.ts';
import { SwaggerUi } from './swagger-ui.tsx';

export const metadata = { title: 'API reference · Account link service' };

// GET /docs - the API reference for people: the OpenAPI document rendered, and every problem code
export default async function DocsPage() {
  // Rendered per request, so Next can put the proxy's CSP nonce on its scripts (a prerendered
  // page would carry none, and the policy would block them).
  await connection();
  return (
    <main className="wide">
      <p><Link href="/">← Your account</Link> · <a href="/api/openapi.json">openapi.json</a></p>
      <h1>API reference</h1>
      <noscript><p>The interactive reference needs JavaScript; the raw document is at <a href="/api/openapi.json">/api/openapi.json</a>.</p></noscript>
      <SwaggerUi url="/api/openapi.json" />
      <section className="panel" aria-labelledby="problems">
        <h2 id="problems">Problem codes</h2>
        <p className="muted">Every error is <code>application/problem+json</code> with one of these <code>code</code> values; <code>detail</code> says what to fix.</p>
        <table>
          <thead><tr><th scope="col">code</th><th scope="col">status</th><th scope="col">meaning</th></tr></thead>
          <tbody>
            {Object.entries(PROBLEM_CATALOG).map(([code, [status, title]]) => (
              <tr key={code} id={`problem-${code}`}>
                <td><code>{code}</code></td>
                <td>{status}</td>
                <td>{title}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </main>
  );
}
