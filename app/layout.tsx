import type { ReactNode } from 'react';
import './globals.css';

export const metadata = {
  title: 'Account link service',
  description: 'Wallet links, subscription entitlements and leagues for your app.',
};

export default function RootLayout({ children }: { children: ReactNode }) {
  return (
    <html lang="en">
      <body>{children}</body>
    </html>
  );
}
