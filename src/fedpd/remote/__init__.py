"""Engines whose clients run elsewhere: the node runtime, its durable client store and the
server-side engine that talks to nodes through a message transport (:mod:`fedpd.flower` is one
transport; :class:`~fedpd.remote.engine.LoopbackTransport` runs the nodes in this process)."""
