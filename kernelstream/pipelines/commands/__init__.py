"""The CLI's commands, one module each (``COMMAND``: its help texts; ``add_arguments(p)``: its
arguments and handler); what several share is in ``_common`` (how a command's parser is made,
error line, progress, argument groups) and ``_runs`` (the runners and ``summary.json`` of
``replay`` and ``tune``)."""
