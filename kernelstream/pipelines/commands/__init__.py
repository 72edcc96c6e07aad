"""The CLI's commands, one module each (``add_parser(sub)``: its arguments and handler); what
several share is in ``_common`` (error line, progress, argument groups) and ``_runs`` (the
runners and ``summary.json`` of ``replay`` and ``tune``)."""
