export default function HomePage() {
  return (
    <main>
      <h1>Account link service</h1>
      <p>The API is running. See <a href="/api/health">/api/health</a>.</p>
    </main>
  );
}
