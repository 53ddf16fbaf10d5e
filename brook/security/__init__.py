"""Security: principals, TLS, authentication, authorization and quotas (docs/security.md)."""
