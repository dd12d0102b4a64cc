"""HTTP routes, one module per API surface or resource."""
