"""Who is asking: listeners, TLS, SASL and the principal every request carries; ACLs."""
