"""Access: API keys at rest (created, listed, revoked; hashed), their /v1/keys routes, and idempotency
keys of the POSTs that create something."""
