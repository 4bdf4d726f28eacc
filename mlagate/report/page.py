"""What the report's HTML pages share: escaping, tables and one style sheet (static, no JavaScript)."""

import html

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } table.env td, table.env th, table.left td, td:first-child { text-align: left; }
figure { margin: 0.8em 0; } figcaption { color: #555; font-size: 90%; } img { max-width: 100%; }
.na { color: #999; } small { color: #666; } a { color: #0550ae; } .bad { color: #b00020; font-weight: 600; }
.notes { display: inline-block; text-align: left; max-width: 36em; } .scroll { overflow-x: auto; }
"""


def escape(value) -> str:
    return html.escape(str(value))


def table(header, body, cls="") -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
    # in a scrolling box: a wide table scrolls on a narrow screen instead of widening the page
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
