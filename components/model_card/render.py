"""The model card as Markdown and as a self-contained HTML page."""
import html
from typing import List

from leantfx.components.model_card import card as card_lib


def _md_cell(text: str) -> str:
  return str(text).replace('|', '\\|').replace('\n', ' ')


def markdown(card: card_lib.Card) -> str:
  """The card's sections as Markdown (a table per section that has rows)."""
  lines: List[str] = [f'# {card.title}', '']
  for section in card.sections:
    lines += [f'## {section.title}', '']
    if section.title.startswith('Limitations'):
      lines += [f'- {p}' for p in section.paragraphs] + ['']
    else:
      for paragraph in section.paragraphs:
        lines += [paragraph, '']
    if section.rows:
      lines.append('| ' + ' | '.join(_md_cell(c) for c in section.columns) +
                   ' |')
      lines.append('|' + '---|' * len(section.columns))
      for row in section.rows:
        lines.append('| ' + ' | '.join(_md_cell(c) for c in row) + ' |')
      lines.append('')
  lines.append(f'Layout: Model Card Toolkit {card_lib.SCHEMA_VERSION} '
               '(model_card.json).')
  return '\n'.join(lines) + '\n'


_STYLE = ('body{font-family:sans-serif;max-width:70em;margin:2em auto;'
          'line-height:1.4}table{border-collapse:collapse;margin:.5em 0 1em}'
          'td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}'
          'th{background:#f4f4f4}')


def html_page(card: card_lib.Card) -> str:
  """The card's sections as one HTML page, no external resources."""
  e = html.escape
  parts = ['<!DOCTYPE html>', '<html><head><meta charset="utf-8">',
           f'<title>{e(card.title)}</title><style>{_STYLE}</style>',
           '</head><body>', f'<h1>{e(card.title)}</h1>']
  for section in card.sections:
    parts.append(f'<h2>{e(section.title)}</h2>')
    if section.title.startswith('Limitations'):
      parts.append('<ul>' + ''.join(f'<li>{e(p)}</li>'
                                    for p in section.paragraphs) + '</ul>')
    else:
      parts += [f'<p>{e(p)}</p>' for p in section.paragraphs]
    if section.rows:
      parts.append('<table><tr>' + ''.join(
          f'<th>{e(str(c))}</th>' for c in section.columns) + '</tr>')
      for row in section.rows:
        parts.append('<tr>' + ''.join(f'<td>{e(str(c))}</td>' for c in row)
                     + '</tr>')
      parts.append('</table>')
  parts.append(f'<p>Layout: Model Card Toolkit {card_lib.SCHEMA_VERSION} '
               '(model_card.json).</p></body></html>')
  return '\n'.join(parts) + '\n'
