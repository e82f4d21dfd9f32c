"""The language server: a thin adapter that schedules pipeline stages and speaks LSP."""
