'use client';

import { useEffect, useRef } from 'react';
import 'swagger-ui-dist/swagger-ui.css';

/** Swagger UI from the swagger-ui-dist package, bundled and served by this app: nothing from a CDN. */
export function SwaggerUi({ url }: { url: string }) {
  const container = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let cancelled = false;
    import('swagger-ui-dist/swagger-ui-bundle.js').then(({ default: SwaggerUIBundle }) => {
      if (cancelled || !container.current) return;
      SwaggerUIBundle({ url, domNode: container.current, deepLinking: true, tryItOutEnabled: false, defaultModelsExpandDepth: 0 });
    });
    return () => {
      cancelled = true;
    };
  }, [url]);
  return <div ref={container} data-testid="swagger-ui" />;
}
