"""Agent <-> ppwtop transport: length-prefixed typed frames on a Unix socket.

:mod:`.frames` is the wire format, :mod:`.sender` the target's never-blocking send queue,
:mod:`.endpoint` the sockets.  Standard library only, so the agent can import it anywhere.
"""
