"""Versioned database schema migrations, one directory per backend."""
