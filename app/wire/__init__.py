"""Bodies on the wire: decoding requests into typed batches, encoding results, tensor codecs and the
request budgets checked before any array is decoded."""
