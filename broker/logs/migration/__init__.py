"""Topic migration between classic and diskless on the broker (issue 18): the leader's seal
(``sealer``). Which log serves a migrating partition's offsets is decided by
``broker.logs.router``."""
