"""Live collection in the ppwtop process: the session with one in-target agent.

:mod:`.session` owns the session loop (frames -> decode -> recording + feed), :mod:`.feed` the
live :class:`SnapshotFeed`, :mod:`.serve` the setup every live command shares
(:func:`serve_session`), :mod:`.launch` how ``ppwtop run`` starts the command.
"""

from ppwtop.live.serve import serve as serve_session

__all__ = ["serve_session"]
