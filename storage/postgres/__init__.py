"""PostgreSQL plumbing shared by the production stores: the pool (error mapping,
round-trip accounting, LISTEN), the versioned table migrations and the current
definition of each function, applied after them."""
