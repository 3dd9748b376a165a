"""Models: what a user may name (hub ids, allowed folders), the Hub, the catalog, loading, device and precision,
and the fast sampling and step paths the trainer uses (engine, static_decode)."""
