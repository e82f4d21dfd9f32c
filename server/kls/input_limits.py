"""How much kls reads: the bounds on templates, configs, config values and protocol messages.

Each bound keeps one step under about a second on the 2-core CPU machines, or turns the input
into a finding that says what to do. The timings below were measured there (2026-11, CPython
3.11, Jinja 3.1.6) with `parse_template` and `load_instances`; how to measure again is in
docs/SECURITY.md ("Project boundary and configuration limits").

Templates. Parsing costs ~10 µs per byte of Jinja code (the text inside `{{ }}` and `{% %}`:
64 KiB of `{{[1,2,...]}}` parse in 0.62 s, of `{% if %}` blocks in 0.39 s) and ~0.35 µs per byte
of plain text (256 KiB of plain lines in 0.09 s). A realistic 10,000-line template (the shipped
CUTLASS 3.x GEMM repeated, 362 KB) parses in 0.66 s. The shipped templates are 17 to 74 lines,
at most 2.7 KB, with under 1 KB of Jinja code each.

Configs. With the key locator made linear, `load_instances` costs ~0.12 ms per instance:
1,000 instances load in 0.11 s, 2,000 in 0.24 s, 5,000 in 0.62 s, 10,000 (1.8 MB) in 1.3 s.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

# A template file (or editor text) larger than this is not parsed: 1 MiB of plain text parses
# in ~0.4 s; the code budget below bounds the expensive part.
MAX_TEMPLATE_BYTES = 1 * MIB
# More lines than this is not a hand-written kernel template; every stage (parse, source map,
# rendered-syntax check) is per line. 10,000 realistic lines parse in 0.66 s, 20,000 in 1.8 s.
MAX_TEMPLATE_LINES = 10_000
# Bytes inside `{{ }}` and `{% %}`: 64 KiB parse in at most 0.66 s (the worst shape measured).
MAX_TEMPLATE_CODE_BYTES = 64 * KIB

# kls.toml (or pyproject.toml): 1 MiB holds ~5,000 instances written out in full.
MAX_CONFIG_BYTES = 1 * MIB
# Instances read from one config; those after it are ignored with a finding (2,000: 0.24 s).
MAX_INSTANCES = 2_000

# Sizes, strides and offsets are emitted into C as int64_t.
INT64_MAX = 2**63 - 1

# One JSON-RPC message. VS Code stops syncing files to extensions at 50 MB, so an editor's
# didOpen of any file it syncs fits (a template over MAX_TEMPLATE_BYTES then gets KT105); the
# bound keeps a hostile `Content-Length` from making the server allocate or wait for 1 TB.
MAX_MESSAGE_BYTES = 64 * MIB
# One header line of a JSON-RPC message, and the number of header lines before the body.
MAX_HEADER_LINE_BYTES = 4 * KIB
MAX_HEADER_LINES = 16
