"""Topic migration between classic and diskless on the broker (issue 18): which log serves
a migrating partition's offsets (``routing``) and the leader's seal (``sealer``)."""
