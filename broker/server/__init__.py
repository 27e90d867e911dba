"""The request pipeline: connections, dispatch to the handlers, and what every stage
shares (metrics, log budgets, refusals, quotas, the HTTP endpoint)."""
