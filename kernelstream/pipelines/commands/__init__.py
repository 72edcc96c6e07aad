"""The CLI's commands, one module each."""
