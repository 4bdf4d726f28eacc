"""report: what people read: terminal and Markdown text, plots, the static site."""
