"""End-to-end workflows that tie data, engine, methods and reports together."""
