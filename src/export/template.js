/* pi-rs session export viewer.
   Reads the JSON blob in #session-data ({header, entries, leafId, systemPrompt, tools}), draws the
   session tree in the side panel and one branch (root to a leaf) as a conversation. Every node is
   built with DOM calls: text from the session only ever reaches the page through textContent or
   attribute setters; it is never parsed as markup. Nothing is loaded from the network. */
(function () {
  'use strict';

  // ---------------------------------------------------------------- small helpers

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function add(parent) {
    for (var k = 1; k < arguments.length; k++) {
      if (arguments[k]) parent.appendChild(arguments[k]);
    }
    return parent;
  }

  function str(value) {
    if (typeof value === 'string') return value;
    if (value === undefined || value === null) return '';
    return String(value);
  }

  function isObj(value) {
    return value !== null && typeof value === 'object' && !Array.isArray(value);
  }

  function num(value) {
    return typeof value === 'number' && isFinite(value) ? value : 0;
  }

  function pretty(value) {
    try {
      var text = JSON.stringify(value, null, 2);
      return text === undefined ? String(value) : text;
    } catch (e) {
      return String(value);
    }
  }

  function oneLine(text, max) {
    var flat = str(text).replace(/\s+/g, ' ').trim();
    return flat.length > max ? flat.slice(0, max - 1) + '\u2026' : flat;
  }

  function pad2(n) {
    return n < 10 ? '0' + n : String(n);
  }

  function formatTime(ts) {
    if (typeof ts !== 'string' && typeof ts !== 'number') return '';
    var date = new Date(ts);
    if (isNaN(date.getTime())) return '';
    return date.getFullYear() + '-' + pad2(date.getMonth() + 1) + '-' + pad2(date.getDate()) +
      ' ' + pad2(date.getHours()) + ':' + pad2(date.getMinutes()) + ':' + pad2(date.getSeconds());
  }

  function formatTokens(n) {
    n = num(n);
    if (n < 1000) return String(n);
    if (n < 1000000) return (n / 1000).toFixed(n < 10000 ? 1 : 0) + 'k';
    return (n / 1000000).toFixed(1) + 'M';
  }

  function formatCost(c) {
    c = num(c);
    return '$' + c.toFixed(c >= 1 ? 2 : 4);
  }

  function plural(n, word, many) {
    return n + ' ' + (n === 1 ? word : many || word + 's');
  }

  function details(summaryText, open, className) {
    var box = el('details', className || null);
    if (open) box.open = true;
    box.appendChild(el('summary', null, summaryText));
    return box;
  }

  // ---------------------------------------------------------------- markdown

  // A compact CommonMark-flavoured renderer that builds DOM nodes directly: headings, paragraphs
  // (single newlines become line breaks, as in chat), emphasis, strikethrough, inline code, fenced
  // code, lists (nested, ordered, task items), blockquotes, tables, rules, links and autolinks.
  var markdown = (function () {
    var FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
    var HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
    var RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
    var QUOTE = /^ {0,3}> ?(.*)$/;
    var ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|[ \t]*)$/;
    var TABLE_RULE = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;
    var PUNCT = /[!-\/:-@\[-`{-~]/;
    var URL_AT = /https?:\/\/[^\s<>"]+/iy;
    var ANGLE_URL = /<((?:https?|mailto):[^\s<>]+)>/iy;
    var LINK_TARGET = /\(\s*<?([^\s<>()]*(?:\([^\s()]*\)[^\s<>()]*)*)>?(?:\s+"([^"]*)")?\s*\)/y;

    function isBlank(line) {
      return line === undefined || /^\s*$/.test(line);
    }

    function indentOf(line) {
      var m = /^ */.exec(line);
      return m ? m[0].length : 0;
    }

    function startsBlock(line) {
      return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
        (ITEM.test(line) && !isBlank(ITEM.exec(line)[3]));
    }

    // Quotes and lists nest at most this deep; deeper content is shown as plain text, because
    // thousands of nested boxes make the browser's layout crawl.
    var MAX_DEPTH = 16;

    function render(text, parent) {
      var lines = str(text).replace(/\r\n?/g, '\n').replace(/\t/g, '    ').split('\n');
      blocks(lines, parent, 0);
      return parent;
    }

    function blocks(lines, parent, depth) {
      if (depth > MAX_DEPTH) {
        parent.appendChild(el('pre', 'output', lines.join('\n')));
        return parent;
      }
      var i = 0;
      while (i < lines.length) {
        var line = lines[i];
        var m;
        if (isBlank(line)) {
          i++;
        } else if ((m = FENCE.exec(line))) {
          i = fenced(lines, i, m, parent);
        } else if ((m = HEADING.exec(line))) {
          var heading = el('h' + m[1].length);
          inline(m[2] || '', heading);
          parent.appendChild(heading);
          i++;
        } else if (RULE.test(line)) {
          parent.appendChild(el('hr'));
          i++;
        } else if (QUOTE.test(line)) {
          var inner = [];
          while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
            inner.push(m[1]);
            i++;
          }
          parent.appendChild(blocks(inner, el('blockquote'), depth + 1));
        } else if (ITEM.test(line)) {
          i = list(lines, i, parent, depth);
        } else if (line.indexOf('|') >= 0 && i + 1 < lines.length &&
          lines[i + 1].indexOf('|') >= 0 && TABLE_RULE.test(lines[i + 1])) {
          i = table(lines, i, parent);
        } else {
          var para = [line.trim()];
          i++;
          while (i < lines.length && !isBlank(lines[i]) && !startsBlock(lines[i])) {
            para.push(lines[i].trim());
            i++;
          }
          parent.appendChild(inline(para.join('\n'), el('p')));
        }
      }
      return parent;
    }

    function fenced(lines, start, m, parent) {
      var fence = m[1];
      var indent = indentOf(lines[start]);
      var body = [];
      var i = start + 1;
      while (i < lines.length) {
        var close = lines[i].trim();
        if (close.length >= fence.length && close.charAt(0) === fence.charAt(0) &&
          /^(`+|~+)$/.test(close) && indentOf(lines[i]) < 4) {
          i++;
          break;
        }
        var strip = Math.min(indent, indentOf(lines[i]));
        body.push(lines[i].slice(strip));
        i++;
      }
      parent.appendChild(codeBlock(body.join('\n'), m[2]));
      return i;
    }

    function list(lines, start, parent, depth) {
      var first = ITEM.exec(lines[start]);
      var baseIndent = first[1].length;
      var ordered = /\d/.test(first[2]);
      var node = el(ordered ? 'ol' : 'ul');
      if (ordered) {
        var startNumber = parseInt(first[2], 10);
        if (startNumber !== 1 && isFinite(startNumber)) node.setAttribute('start', String(startNumber));
      }
      var items = [];
      var loose = false;
      var i = start;
      while (i < lines.length) {
        var j = i;
        while (j < lines.length && isBlank(lines[j])) j++;
        if (j >= lines.length) break;
        var m = ITEM.exec(lines[j]);
        var indent = indentOf(lines[j]);
        if (!m || indent < baseIndent || indent > baseIndent + 1 || /\d/.test(m[2]) !== ordered) break;
        if (j > i) loose = true;
        var contentIndent = indent + m[2].length + 1;
        var body = [m[3] || ''];
        i = j + 1;
        while (i < lines.length) {
          var l = lines[i];
          if (isBlank(l)) {
            var k = i + 1;
            while (k < lines.length && isBlank(lines[k])) k++;
            if (k < lines.length && indentOf(lines[k]) > baseIndent + 1) {
              for (; i < k; i++) body.push('');
              loose = loose || !ITEM.test(lines[k]);
              continue;
            }
            break;
          }
          var ind = indentOf(l);
          if (ITEM.test(l) && ind <= baseIndent + 1) break;
          if (ind > baseIndent + 1) {
            body.push(l.slice(Math.min(ind, contentIndent)));
          } else if (!startsBlock(l)) {
            body.push(l.trim());
          } else {
            break;
          }
          i++;
        }
        items.push(body);
      }
      for (var n = 0; n < items.length; n++) {
        var li = el('li');
        var itemLines = items[n];
        var task = /^\[([ xX])\][ \t]+/.exec(itemLines[0]);
        if (task) {
          itemLines[0] = itemLines[0].slice(task[0].length);
          li.className = 'task';
          li.appendChild(el('span', 'task-box', task[1] === ' ' ? '\u2610 ' : '\u2611 '));
        }
        blocks(itemLines, li, depth + 1);
        if (!loose) unwrapParagraphs(li);
        node.appendChild(li);
      }
      parent.appendChild(node);
      return i;
    }

    // Tight list items show their text without paragraph spacing.
    function unwrapParagraphs(li) {
      var kids = Array.prototype.slice.call(li.childNodes);
      for (var k = 0; k < kids.length; k++) {
        var child = kids[k];
        if (child.nodeName === 'P') {
          while (child.firstChild) li.insertBefore(child.firstChild, child);
          li.removeChild(child);
        }
      }
    }

    function splitRow(line) {
      var s = line.trim();
      if (s.charAt(0) === '|') s = s.slice(1);
      if (s.charAt(s.length - 1) === '|' && s.charAt(s.length - 2) !== '\\') s = s.slice(0, -1);
      var cells = [];
      var cur = '';
      var inCode = false;
      for (var k = 0; k < s.length; k++) {
        var ch = s.charAt(k);
        if (ch === '\\' && s.charAt(k + 1) === '|') {
          cur += '|';
          k++;
          continue;
        }
        if (ch === '`') inCode = !inCode;
        if (ch === '|' && !inCode) {
          cells.push(cur.trim());
          cur = '';
          continue;
        }
        cur += ch;
      }
      cells.push(cur.trim());
      return cells;
    }

    function table(lines, start, parent) {
      var head = splitRow(lines[start]);
      var aligns = splitRow(lines[start + 1]).map(function (cell) {
        var left = cell.charAt(0) === ':';
        var right = cell.charAt(cell.length - 1) === ':';
        return left && right ? 'center' : right ? 'right' : left ? 'left' : '';
      });
      var wrap = el('div', 'table-wrap');
      var tableNode = el('table');
      var headRow = el('tr');
      head.forEach(function (cell, k) {
        var th = inline(cell, el('th'));
        if (aligns[k]) th.style.textAlign = aligns[k];
        headRow.appendChild(th);
      });
      tableNode.appendChild(add(el('thead'), headRow));
      var tbody = el('tbody');
      var i = start + 2;
      while (i < lines.length && !isBlank(lines[i]) && lines[i].indexOf('|') >= 0) {
        var cells = splitRow(lines[i]);
        var row = el('tr');
        for (var k = 0; k < head.length; k++) {
          var td = inline(cells[k] || '', el('td'));
          if (aligns[k]) td.style.textAlign = aligns[k];
          row.appendChild(td);
        }
        tbody.appendChild(row);
        i++;
      }
      tableNode.appendChild(tbody);
      parent.appendChild(add(wrap, tableNode));
      return i;
    }

    function findTicks(text, from, count) {
      var i = from;
      while (i < text.length) {
        var at = text.indexOf('`', i);
        if (at < 0) return -1;
        var n = 0;
        while (text.charAt(at + n) === '`') n++;
        if (n === count) return at;
        i = at + n;
      }
      return -1;
    }

    function safeHref(href) {
      var h = str(href).trim();
      if (/^(https?:|mailto:)/i.test(h) || h.charAt(0) === '#') return h;
      return null;
    }

    function link(parent, label, href, title) {
      var target = safeHref(href);
      var node;
      if (target) {
        node = el('a');
        node.setAttribute('href', target);
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer nofollow');
      } else {
        node = el('span', 'plain-link');
      }
      node.title = title || str(href);
      if (label === null) node.textContent = str(href);
      else inline(label, node);
      parent.appendChild(node);
    }

    // Markdown images would make the browser fetch them; only inline data images are shown, any
    // other image becomes a labelled link.
    function image(parent, alt, src) {
      var source = str(src).trim();
      if (/^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+\/=]+$/i.test(source)) {
        var img = el('img', 'inline-image');
        img.alt = alt;
        img.src = source;
        parent.appendChild(img);
        return;
      }
      link(parent, 'image: ' + (alt || source), source, source);
    }

    function parseLink(text, open) {
      var depth = 0;
      var j = open;
      // Link labels are short; the bound keeps many unmatched brackets from going quadratic.
      var limit = Math.min(text.length, open + 2000);
      for (; j < limit; j++) {
        var c = text.charAt(j);
        if (c === '\\') {
          j++;
        } else if (c === '[') {
          depth++;
        } else if (c === ']') {
          depth--;
          if (depth === 0) break;
        }
      }
      if (j >= limit || text.charAt(j + 1) !== '(') return null;
      LINK_TARGET.lastIndex = j + 1;
      var m = LINK_TARGET.exec(text);
      if (!m) return null;
      return { label: text.slice(open + 1, j), href: m[1], title: m[2], end: LINK_TARGET.lastIndex };
    }

    function trimLinkTail(url) {
      var out = url.replace(/[.,;:!?'"*_]+$/, '');
      while (out.charAt(out.length - 1) === ')' &&
        out.split(')').length > out.split('(').length) {
        out = out.slice(0, -1).replace(/[.,;:!?'"*_]+$/, '');
      }
      return out;
    }

    function emphasis(text, i, memo) {
      var ch = text.charAt(i);
      var n = 0;
      while (text.charAt(i + n) === ch) n++;
      if (ch === '~' && n !== 2) return null;
      var before = i > 0 ? text.charAt(i - 1) : ' ';
      var after = text.charAt(i + n);
      if (after === '' || /\s/.test(after)) return null;
      if (ch === '_' && /[A-Za-z0-9]/.test(before)) return null;
      var sizes = n >= 3 ? [3, 2, 1] : n === 2 ? [2, 1] : [1];
      for (var s = 0; s < sizes.length; s++) {
        var use = sizes[s];
        var close = findCloser(text, i + use, ch, use, memo);
        if (close > i + use) {
          var inner = text.slice(i + use, close);
          var tag = ch === '~' ? 'del' : use === 1 ? 'em' : 'strong';
          return { tag: tag, both: use === 3, inner: inner, end: close + use };
        }
      }
      return null;
    }

    // `memo` remembers, per delimiter, a position from which no closer exists, so a text full of
    // unmatched markers costs linear rather than quadratic time.
    function findCloser(text, from, ch, size, memo) {
      var key = ch + size;
      if (memo[key] !== undefined && from >= memo[key]) return -1;
      var found = scanCloser(text, from, ch, size);
      if (found < 0) memo[key] = memo[key] === undefined ? from : Math.min(memo[key], from);
      return found;
    }

    function scanCloser(text, from, ch, size) {
      var j = from;
      while (j < text.length) {
        var c = text.charAt(j);
        if (c === '\\') {
          j += 2;
          continue;
        }
        if (c === '`') {
          var n = 0;
          while (text.charAt(j + n) === '`') n++;
          var end = findTicks(text, j + n, n);
          j = end < 0 ? j + n : end + n;
          continue;
        }
        if (c === ch) {
          var run = 0;
          while (text.charAt(j + run) === ch) run++;
          var prev = text.charAt(j - 1);
          var next = text.charAt(j + run);
          var okSides = !/\s/.test(prev) && !(ch === '_' && /[A-Za-z0-9]/.test(next));
          if (okSides && (run === size || (size === 1 && run === 3) || (size === 2 && run === 3))) {
            return run === size ? j : j + run - size;
          }
          j += run;
          continue;
        }
        j++;
      }
      return -1;
    }

    function inline(text, parent) {
      var buf = '';
      var memo = {};
      function flush() {
        if (buf) {
          parent.appendChild(document.createTextNode(buf));
          buf = '';
        }
      }
      var i = 0;
      while (i < text.length) {
        var ch = text.charAt(i);
        if (ch === '\\' && i + 1 < text.length) {
          var next = text.charAt(i + 1);
          if (PUNCT.test(next)) {
            buf += next;
            i += 2;
            continue;
          }
        }
        if (ch === '\n') {
          flush();
          parent.appendChild(el('br'));
          i++;
          continue;
        }
        if (ch === '`') {
          var n = 0;
          while (text.charAt(i + n) === '`') n++;
          var tickKey = 't' + n;
          var close = memo[tickKey] !== undefined && i >= memo[tickKey] ? -1 : findTicks(text, i + n, n);
          if (close < 0 && memo[tickKey] === undefined) memo[tickKey] = i;
          if (close >= 0) {
            flush();
            var code = text.slice(i + n, close).replace(/\n/g, ' ');
            if (code.length > 2 && code.charAt(0) === ' ' && code.charAt(code.length - 1) === ' ' && code.trim()) {
              code = code.slice(1, -1);
            }
            parent.appendChild(el('code', null, code));
            i = close + n;
          } else {
            buf += text.slice(i, i + n);
            i += n;
          }
          continue;
        }
        if (ch === '!' && text.charAt(i + 1) === '[') {
          var img = parseLink(text, i + 1);
          if (img) {
            flush();
            image(parent, img.label, img.href);
            i = img.end;
            continue;
          }
        }
        if (ch === '[') {
          var lk = parseLink(text, i);
          if (lk) {
            flush();
            link(parent, lk.label, lk.href, lk.title);
            i = lk.end;
            continue;
          }
        }
        if (ch === '<') {
          ANGLE_URL.lastIndex = i;
          var angle = ANGLE_URL.exec(text);
          if (angle) {
            flush();
            link(parent, null, angle[1]);
            i = ANGLE_URL.lastIndex;
            continue;
          }
        }
        if ((ch === 'h' || ch === 'H') && (i === 0 || /[\s(\[*_]/.test(text.charAt(i - 1)))) {
          URL_AT.lastIndex = i;
          var bare = URL_AT.exec(text);
          if (bare) {
            var url = trimLinkTail(bare[0]);
            if (/^https?:\/\/./i.test(url)) {
              flush();
              link(parent, null, url);
              i += url.length;
              continue;
            }
          }
        }
        if (ch === '*' || ch === '_' || ch === '~') {
          var em = emphasis(text, i, memo);
          if (em) {
            flush();
            var node = el(em.tag);
            if (em.both) {
              var innerEm = el('em');
              inline(em.inner, innerEm);
              node.appendChild(innerEm);
            } else {
              inline(em.inner, node);
            }
            parent.appendChild(node);
            i = em.end;
            continue;
          }
          // An unmatched run is plain text as a whole, so its parts are not retried.
          var run = 0;
          while (text.charAt(i + run) === ch) run++;
          buf += text.slice(i, i + run);
          i += run;
          continue;
        }
        buf += ch;
        i++;
      }
      flush();
      return parent;
    }

    return { render: render, inline: inline };
  })();

  function codeBlock(code, lang) {
    var wrap = el('div', 'code-block');
    if (lang) wrap.appendChild(el('div', 'code-lang', lang));
    wrap.appendChild(add(el('pre'), el('code', null, code)));
    return wrap;
  }

  // A message the renderer cannot handle (say, nesting deep enough to exhaust the stack) is shown
  // as plain text instead of taking the whole page down.
  function markdownBlock(text, className) {
    var box = el('div', 'md' + (className ? ' ' + className : ''));
    try {
      return markdown.render(text, box);
    } catch (err) {
      box.textContent = '';
      box.appendChild(el('pre', 'output', str(text)));
      return box;
    }
  }

  // Long outputs show their first lines with a button for the rest.
  function outputBlock(text, className, maxLines) {
    var full = str(text);
    var lines = full.split('\n');
    var pre = el('pre', 'output' + (className ? ' ' + className : ''));
    if (lines.length <= maxLines) {
      pre.textContent = full;
      return pre;
    }
    var shortText = lines.slice(0, maxLines).join('\n');
    var wrap = el('div', 'expandable');
    pre.textContent = shortText;
    var more = el('button', 'more', 'Show all ' + lines.length + ' lines');
    more.type = 'button';
    var expanded = false;
    more.addEventListener('click', function () {
      expanded = !expanded;
      pre.textContent = expanded ? full : shortText;
      more.textContent = expanded ? 'Show fewer lines' : 'Show all ' + lines.length + ' lines';
    });
    return add(wrap, pre, more);
  }

  function diffBlock(diffText) {
    var box = el('div', 'diff');
    str(diffText).split('\n').forEach(function (line) {
      var first = line.charAt(0);
      var kind = first === '+' ? 'diff-add' : first === '-' ? 'diff-del' : 'diff-ctx';
      box.appendChild(el('div', kind, line === '' ? ' ' : line));
    });
    return box;
  }

  function imageNode(block) {
    var mime = str(block.mimeType).toLowerCase();
    var payload = str(block.data).replace(/\s+/g, '');
    if (!/^image\/(png|jpeg|jpg|gif|webp|bmp)$/.test(mime) || !/^[A-Za-z0-9+\/=]+$/.test(payload)) {
      return el('div', 'muted', '[image' + (mime ? ' ' + mime : '') + ' not shown]');
    }
    var img = el('img', 'inline-image');
    img.alt = 'attached image (' + mime + ')';
    img.src = 'data:' + mime + ';base64,' + payload;
    img.addEventListener('click', function () {
      img.classList.toggle('zoomed');
    });
    return img;
  }

  function textOf(content) {
    if (typeof content === 'string') return content;
    if (!Array.isArray(content)) return '';
    return content.filter(function (b) {
      return isObj(b) && b.type === 'text';
    }).map(function (b) {
      return str(b.text);
    }).join('\n');
  }

  // ---------------------------------------------------------------- session model

  var loadError = null;

  function readData() {
    try {
      var node = document.getElementById('session-data');
      var parsed = JSON.parse(node ? node.textContent : '{}');
      return isObj(parsed) ? parsed : {};
    } catch (err) {
      loadError = err;
      return {};
    }
  }

  var data = readData();
  var header = isObj(data.header) ? data.header : {};
  var byId = new Map();
  var order = new Map();
  var entries = [];
  (Array.isArray(data.entries) ? data.entries : []).forEach(function (entry) {
    if (!isObj(entry) || typeof entry.id !== 'string' || byId.has(entry.id)) return;
    byId.set(entry.id, entry);
    order.set(entry.id, entries.length);
    entries.push(entry);
  });

  function parentOf(id) {
    var entry = byId.get(id);
    var parent = entry && entry.parentId;
    return typeof parent === 'string' && parent !== id && byId.has(parent) ? parent : null;
  }

  var children = new Map();
  var roots = [];
  entries.forEach(function (entry) {
    var parent = parentOf(entry.id);
    if (parent === null) {
      roots.push(entry.id);
    } else {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(entry.id);
    }
  });

  function kidsOf(id) {
    return children.get(id) || [];
  }

  // Root first; a parent loop (broken file) ends the walk instead of spinning.
  function pathTo(id) {
    var path = [];
    var seen = new Set();
    var cur = id;
    while (cur !== null && cur !== undefined && !seen.has(cur)) {
      seen.add(cur);
      path.push(cur);
      cur = parentOf(cur);
    }
    return path.reverse();
  }

  // The most recently written leaf below `id` (itself when it has no children).
  function newestLeafUnder(id) {
    var best = id;
    var bestOrder = -1;
    var stack = [id];
    var seen = new Set();
    while (stack.length) {
      var cur = stack.pop();
      if (seen.has(cur)) continue;
      seen.add(cur);
      var kids = kidsOf(cur);
      if (kids.length === 0 && order.get(cur) > bestOrder) {
        best = cur;
        bestOrder = order.get(cur);
      }
      for (var k = 0; k < kids.length; k++) stack.push(kids[k]);
    }
    return best;
  }

  var labels = new Map();
  var sessionName = '';
  entries.forEach(function (entry) {
    if (entry.type === 'label' && typeof entry.targetId === 'string') {
      var text = str(entry.label).trim();
      if (text) labels.set(entry.targetId, text);
      else labels.delete(entry.targetId);
    } else if (entry.type === 'session_info') {
      sessionName = str(entry.name).trim();
    }
  });

  var activeLeaf = typeof data.leafId === 'string' && byId.has(data.leafId) ? data.leafId :
    entries.length ? entries[entries.length - 1].id : null;
  var activePath = new Set(activeLeaf === null ? [] : pathTo(activeLeaf));
  var leafCount = entries.filter(function (entry) {
    return kidsOf(entry.id).length === 0;
  }).length;

  // Bookkeeping entries the views hide unless "all entries" is on.
  var MINOR_TYPES = { label: true, custom: true, session_info: true };
  var state = { shownLeaf: activeLeaf, selected: null, showAll: false, filter: '' };

  // ---------------------------------------------------------------- tree panel

  function summarize(entry) {
    var msg = isObj(entry.message) ? entry.message : {};
    switch (entry.type) {
      case 'message':
        switch (msg.role) {
          case 'user':
            return { kind: 'user', tag: 'user', text: textOf(msg.content) || '(image)' };
          case 'assistant': {
            var text = textOf(msg.content);
            if (!text && Array.isArray(msg.content)) {
              var calls = msg.content.filter(function (b) {
                return isObj(b) && b.type === 'toolCall';
              }).map(function (b) {
                return str(b.name);
              });
              if (calls.length) text = 'calls ' + calls.join(', ');
            }
            if (!text && msg.errorMessage) text = 'error: ' + str(msg.errorMessage);
            return { kind: 'assistant', tag: 'assistant', text: text || '(' + str(msg.stopReason || 'empty') + ')' };
          }
          case 'toolResult':
            return {
              kind: msg.isError ? 'tool-error' : 'tool', tag: 'result',
              text: str(msg.toolName) + ': ' + textOf(msg.content)
            };
          case 'bashExecution':
            return { kind: 'bash', tag: 'shell', text: '$ ' + str(msg.command) };
          case 'custom':
            return { kind: 'custom', tag: 'custom', text: str(msg.customType) + ': ' + textOf(msg.content) };
          case 'compactionSummary':
            return { kind: 'compaction', tag: 'compacted', text: str(msg.summary) };
          case 'branchSummary':
            return { kind: 'summary', tag: 'summary', text: str(msg.summary) };
          default:
            return { kind: 'other', tag: str(msg.role) || 'message', text: '' };
        }
      case 'compaction':
        return { kind: 'compaction', tag: 'compacted', text: formatTokens(entry.tokensBefore) + ' tokens summarized' };
      case 'branch_summary':
        return { kind: 'summary', tag: 'summary', text: str(entry.summary) };
      case 'custom_message':
        return { kind: 'custom', tag: 'custom', text: str(entry.customType) + ': ' + textOf(entry.content) };
      case 'model_change':
        return { kind: 'setting', tag: 'model', text: str(entry.provider) + '/' + str(entry.modelId) };
      case 'thinking_level_change':
        return { kind: 'setting', tag: 'thinking', text: str(entry.thinkingLevel) };
      case 'label':
        return { kind: 'minor', tag: 'label', text: entry.label ? str(entry.label) + ' \u2192 ' + str(entry.targetId) : 'cleared on ' + str(entry.targetId) };
      case 'session_info':
        return { kind: 'minor', tag: 'name', text: str(entry.name) };
      case 'custom':
        return { kind: 'minor', tag: 'data', text: str(entry.customType) };
      default:
        return { kind: 'other', tag: str(entry.type) || 'entry', text: '' };
    }
  }

  // One-line previews drop the commonest markdown markers.
  function plainText(text) {
    return str(text).replace(/^\s{0,3}#{1,6}\s+/gm, '').replace(/\*\*|__|`/g, '');
  }

  var treeRows = new Map();

  function buildTree() {
    var list = document.getElementById('tree');
    list.textContent = '';
    treeRows.clear();
    var seen = new Set();
    var stack = [];
    function pushAll(ids, indent) {
      var fork = ids.length > 1;
      for (var k = ids.length - 1; k >= 0; k--) {
        stack.push({ id: ids[k], indent: indent, fork: fork ? (k === ids.length - 1 ? 'last' : 'mid') : '' });
      }
    }
    // Entries caught in a parent loop have no root; they are listed after the real roots.
    var starts = roots.concat(entries.map(function (e) { return e.id; }));
    for (var s = 0; s < starts.length; s++) {
      if (seen.has(starts[s])) continue;
      pushAll([starts[s]], 0);
      while (stack.length) {
        var item = stack.pop();
        if (seen.has(item.id)) continue;
        seen.add(item.id);
        list.appendChild(treeRow(item));
        var kids = kidsOf(item.id);
        pushAll(kids, kids.length > 1 ? item.indent + 1 : item.indent);
      }
    }
    document.getElementById('tree-footer').textContent =
      plural(entries.length, 'entry', 'entries') + ' \u00b7 ' + plural(leafCount, 'branch', 'branches');
  }

  function treeRow(item) {
    var entry = byId.get(item.id);
    var info = summarize(entry);
    var li = el('li', 'tree-row kind-' + info.kind);
    li.setAttribute('role', 'treeitem');
    li.style.setProperty('--indent', String(Math.min(item.indent, 16)));
    var button = el('button', 'tree-button');
    button.type = 'button';
    button.title = info.tag + ' \u00b7 ' + entry.id + (formatTime(entry.timestamp) ? ' \u00b7 ' + formatTime(entry.timestamp) : '');
    if (item.fork) button.appendChild(el('span', 'fork-mark', item.fork === 'last' ? '\u2514' : '\u251c'));
    button.appendChild(el('span', 'dot'));
    button.appendChild(el('span', 'tree-tag', info.tag));
    button.appendChild(el('span', 'tree-text', oneLine(plainText(info.text), 90)));
    if (labels.has(entry.id)) button.appendChild(el('span', 'badge label-badge', labels.get(entry.id)));
    if (entry.id === activeLeaf) button.appendChild(el('span', 'badge leaf-badge', 'leaf'));
    button.addEventListener('click', function () {
      select(entry.id, true);
    });
    li.appendChild(button);
    treeRows.set(entry.id, { li: li, entry: entry, search: (info.tag + ' ' + info.text + ' ' + (labels.get(entry.id) || '')).toLowerCase() });
    return li;
  }

  function refreshTree() {
    var shown = new Set(pathTo(state.shownLeaf));
    treeRows.forEach(function (row, id) {
      var hidden = (!state.showAll && MINOR_TYPES[row.entry.type]) ||
        (state.filter && row.search.indexOf(state.filter) < 0);
      row.li.classList.toggle('hidden', !!hidden);
      row.li.classList.toggle('on-active', activePath.has(id));
      row.li.classList.toggle('on-shown', shown.has(id));
      row.li.classList.toggle('selected', id === state.selected);
    });
  }

  // ---------------------------------------------------------------- conversation

  function shell(entry, kind, title, meta) {
    var box = el('section', 'entry kind-' + kind);
    box.setAttribute('id', 'entry-' + entry.id);
    var head = el('div', 'entry-head');
    head.appendChild(el('span', 'entry-role', title));
    if (meta) head.appendChild(el('span', 'entry-meta', meta));
    if (labels.has(entry.id)) head.appendChild(el('span', 'badge label-badge', labels.get(entry.id)));
    var spacer = el('span', 'spacer');
    head.appendChild(spacer);
    var time = formatTime(entry.timestamp);
    if (time) head.appendChild(el('time', 'entry-time', time));
    var idButton = el('button', 'entry-id', entry.id);
    idButton.type = 'button';
    idButton.title = 'Show this entry in the tree';
    idButton.addEventListener('click', function () {
      select(entry.id, false);
    });
    head.appendChild(idButton);
    box.appendChild(head);
    var body = el('div', 'entry-body');
    box.appendChild(body);
    return { box: box, body: body };
  }

  function divider(entry, text, extra) {
    var box = el('div', 'divider');
    box.setAttribute('id', 'entry-' + entry.id);
    box.appendChild(el('span', 'divider-text', text));
    if (labels.has(entry.id)) box.appendChild(el('span', 'badge label-badge', labels.get(entry.id)));
    if (extra !== undefined) {
      var more = details('data', false, 'divider-data');
      more.appendChild(el('pre', 'output', pretty(extra)));
      box.appendChild(more);
    }
    return box;
  }

  var SKILL = /^<skill name="([^"]*)" location="([^"]*)">\n([\s\S]*?)\n<\/skill>(?:\n\n([\s\S]*))?$/;

  function renderUserContent(content, body) {
    var blocks = typeof content === 'string' ? [{ type: 'text', text: content }] :
      Array.isArray(content) ? content : [];
    blocks.forEach(function (block, k) {
      if (!isObj(block)) return;
      if (block.type === 'text') {
        var text = str(block.text);
        var skill = k === 0 ? SKILL.exec(text) : null;
        if (skill) {
          var box = details('Skill: ' + skill[1], false, 'skill');
          box.appendChild(el('div', 'muted small', skill[2]));
          box.appendChild(markdownBlock(skill[3]));
          body.appendChild(box);
          if (skill[4]) body.appendChild(markdownBlock(skill[4]));
        } else {
          body.appendChild(markdownBlock(text));
        }
      } else if (block.type === 'image') {
        body.appendChild(imageNode(block));
      } else {
        body.appendChild(el('pre', 'output', pretty(block)));
      }
    });
  }

  function shortPath(p) {
    var path = str(p);
    var home = str(header.cwd);
    if (home && path.indexOf(home + '/') === 0) return path.slice(home.length + 1);
    return path;
  }

  function toolSummary(name, args) {
    switch (name) {
      case 'bash':
        return args.timeout ? 'timeout ' + str(args.timeout) + 's' : '';
      case 'read': {
        var range = '';
        if (args.offset !== undefined || args.limit !== undefined) {
          var from = num(args.offset) || 1;
          range = ':' + from + (args.limit !== undefined ? '-' + (from + num(args.limit) - 1) : '');
        }
        return shortPath(args.path) + range;
      }
      case 'write':
        return shortPath(args.path) + ' (' + plural(str(args.content).split('\n').length, 'line') + ')';
      case 'edit':
        return shortPath(args.path) + (Array.isArray(args.edits) ? ' (' + plural(args.edits.length, 'edit') + ')' : '');
      case 'ls':
        return shortPath(args.path || '.');
      case 'grep':
      case 'find':
        return str(args.pattern) + (args.path ? '  in ' + shortPath(args.path) : '') + (args.glob ? '  (' + str(args.glob) + ')' : '');
      default:
        return '';
    }
  }

  function toolArguments(name, args, result) {
    switch (name) {
      case 'bash':
        return el('pre', 'command', '$ ' + str(args.command));
      case 'write':
        return outputBlock(str(args.content), 'code', 30);
      case 'edit': {
        var diff = result && isObj(result.details) && typeof result.details.diff === 'string' ? result.details.diff : null;
        if (diff !== null) return diffBlock(diff);
        var edits = Array.isArray(args.edits) ? args.edits :
          (args.oldText !== undefined ? [{ oldText: args.oldText, newText: args.newText }] : []);
        var box = el('div', 'edits');
        edits.forEach(function (edit) {
          if (!isObj(edit)) return;
          var lines = str(edit.oldText).split('\n').map(function (l) { return '-' + l; })
            .concat(str(edit.newText).split('\n').map(function (l) { return '+' + l; }));
          box.appendChild(diffBlock(lines.join('\n')));
        });
        return box;
      }
      case 'read':
      case 'ls':
      case 'grep':
      case 'find':
        return null;
      default: {
        var argsBox = details('arguments', true, 'tool-args');
        argsBox.appendChild(el('pre', 'output', pretty(args)));
        return argsBox;
      }
    }
  }

  function toolResultBody(result, name) {
    var box = el('div', 'tool-result');
    var text = textOf(result.content);
    var lines = name === 'edit' && !result.isError ? 4 : 25;
    if (text) box.appendChild(outputBlock(text, result.isError ? 'error-text' : '', lines));
    if (Array.isArray(result.content)) {
      result.content.forEach(function (block) {
        if (isObj(block) && block.type === 'image') box.appendChild(imageNode(block));
      });
    }
    if (!text && !box.firstChild) box.appendChild(el('div', 'muted small', '(no output)'));
    return box;
  }

  function renderToolCall(call, result) {
    var name = str(call.name);
    var args = isObj(call.arguments) ? call.arguments : {};
    var status = !result ? 'pending' : result.isError ? 'error' : 'ok';
    var box = el('div', 'tool tool-' + status);
    var head = el('div', 'tool-head');
    head.appendChild(el('span', 'tool-name', name));
    head.appendChild(el('span', 'tool-summary', toolSummary(name, args)));
    head.appendChild(el('span', 'spacer'));
    head.appendChild(el('span', 'badge status-' + status,
      status === 'pending' ? 'no result on this branch' : status === 'error' ? 'error' : 'done'));
    box.appendChild(head);
    var argsView = toolArguments(name, args, result);
    if (argsView) box.appendChild(argsView);
    if (result) box.appendChild(toolResultBody(result, name));
    return box;
  }

  function usageLine(msg) {
    var usage = isObj(msg.usage) ? msg.usage : null;
    if (!usage) return null;
    var parts = ['in ' + formatTokens(usage.input), 'out ' + formatTokens(usage.output)];
    if (num(usage.cacheRead) || num(usage.cacheWrite)) {
      parts.push('cache read ' + formatTokens(usage.cacheRead) + ' / write ' + formatTokens(usage.cacheWrite));
    }
    if (isObj(usage.cost) && num(usage.cost.total)) parts.push(formatCost(usage.cost.total));
    return el('div', 'usage', parts.join(' \u00b7 '));
  }

  function renderAssistant(entry, msg, results) {
    var model = [str(msg.provider), str(msg.model)].filter(Boolean).join('/');
    var parts = shell(entry, 'assistant', 'Assistant', model);
    var body = parts.body;
    (Array.isArray(msg.content) ? msg.content : []).forEach(function (block) {
      if (!isObj(block)) return;
      switch (block.type) {
        case 'text':
          if (str(block.text).trim()) body.appendChild(markdownBlock(block.text));
          break;
        case 'thinking': {
          var thought = str(block.thinking);
          if (!thought.trim() && !block.redacted) break;
          var box = details(block.redacted ? 'Thinking (redacted by the provider)' : 'Thinking', false, 'thinking');
          if (thought.trim()) box.appendChild(markdownBlock(thought));
          body.appendChild(box);
          break;
        }
        case 'toolCall':
          body.appendChild(renderToolCall(block, results.get(str(block.id))));
          break;
        case 'image':
          body.appendChild(imageNode(block));
          break;
        default:
          body.appendChild(el('pre', 'output', pretty(block)));
      }
    });
    if (msg.stopReason === 'error' || msg.stopReason === 'aborted') {
      var reason = msg.stopReason === 'aborted' ? 'Aborted' : 'Error';
      body.appendChild(el('div', 'error-box', reason + (msg.errorMessage ? ': ' + str(msg.errorMessage) : '')));
    } else if (msg.stopReason === 'length') {
      body.appendChild(el('div', 'warn-box', 'Stopped at the output token limit.'));
    }
    add(parts.box, usageLine(msg));
    return parts.box;
  }

  function renderBash(entry, msg) {
    var parts = shell(entry, 'bash', 'Shell', msg.excludeFromContext ? 'not sent to the model' : 'run by the user');
    parts.body.appendChild(el('pre', 'command', '$ ' + str(msg.command)));
    var failed = msg.cancelled || (typeof msg.exitCode === 'number' && msg.exitCode !== 0);
    if (str(msg.output)) parts.body.appendChild(outputBlock(msg.output, failed ? 'error-text' : '', 25));
    var notes = [];
    if (msg.cancelled) notes.push('cancelled');
    else if (typeof msg.exitCode === 'number') notes.push('exit code ' + msg.exitCode);
    if (msg.truncated) notes.push('output truncated' + (msg.fullOutputPath ? ', full output in ' + str(msg.fullOutputPath) : ''));
    if (notes.length) parts.body.appendChild(el('div', failed ? 'usage error-note' : 'usage', notes.join(' \u00b7 ')));
    return parts.box;
  }

  function renderCustom(entry, customType, content, display, detailsValue) {
    var parts = shell(entry, 'custom', 'Extension message', customType);
    var target = parts.body;
    if (!display) {
      target = details('hidden in the conversation (display: false)', false, 'custom-hidden');
      parts.body.appendChild(target);
    }
    renderUserContent(content, target);
    if (detailsValue !== undefined && detailsValue !== null) {
      var more = details('details', false, 'custom-details');
      more.appendChild(el('pre', 'output', pretty(detailsValue)));
      parts.body.appendChild(more);
    }
    return parts.box;
  }

  function renderSummary(entry, kind, title, meta, summary) {
    var parts = shell(entry, kind, title, meta);
    var box = details(kind === 'compaction' ? 'Summary of the earlier context' : 'Summary of the abandoned branch', true, 'summary-box');
    box.appendChild(markdownBlock(summary));
    parts.body.appendChild(box);
    return parts.box;
  }

  function renderEntry(entry, results, attached) {
    var msg = isObj(entry.message) ? entry.message : {};
    switch (entry.type) {
      case 'message':
        switch (msg.role) {
          case 'user': {
            var user = shell(entry, 'user', 'User');
            renderUserContent(msg.content, user.body);
            return user.box;
          }
          case 'assistant':
            return renderAssistant(entry, msg, results);
          case 'toolResult': {
            if (attached.has(str(msg.toolCallId))) return null;
            var orphan = shell(entry, msg.isError ? 'tool-error' : 'tool', 'Tool result', str(msg.toolName));
            orphan.body.appendChild(toolResultBody(msg, str(msg.toolName)));
            return orphan.box;
          }
          case 'bashExecution':
            return renderBash(entry, msg);
          case 'custom':
            return renderCustom(entry, str(msg.customType), msg.content, msg.display !== false, msg.details);
          case 'compactionSummary':
            return renderSummary(entry, 'compaction', 'Compaction', formatTokens(msg.tokensBefore) + ' tokens before', msg.summary);
          case 'branchSummary':
            return renderSummary(entry, 'summary', 'Branch summary', 'from ' + str(msg.fromId), msg.summary);
          default:
            return divider(entry, 'Message with role ' + (str(msg.role) || '(none)'), msg);
        }
      case 'compaction': {
        var meta = formatTokens(entry.tokensBefore) + ' tokens before \u00b7 kept from ' + str(entry.firstKeptEntryId) +
          (entry.fromHook ? ' \u00b7 by an extension' : '');
        return renderSummary(entry, 'compaction', 'Compaction', meta, entry.summary);
      }
      case 'branch_summary':
        return renderSummary(entry, 'summary', 'Branch summary',
          'returned from ' + str(entry.fromId) + (entry.fromHook ? ' \u00b7 by an extension' : ''), entry.summary);
      case 'custom_message':
        return renderCustom(entry, str(entry.customType), entry.content, entry.display !== false, entry.details);
      case 'model_change':
        return divider(entry, 'Model set to ' + str(entry.provider) + '/' + str(entry.modelId));
      case 'thinking_level_change':
        return divider(entry, 'Thinking level set to ' + str(entry.thinkingLevel));
      case 'label':
        if (!state.showAll) return null;
        return divider(entry, entry.label ? 'Label \u201c' + str(entry.label) + '\u201d set on ' + str(entry.targetId) :
          'Label cleared on ' + str(entry.targetId));
      case 'session_info':
        if (!state.showAll) return null;
        return divider(entry, 'Session named \u201c' + str(entry.name) + '\u201d');
      case 'custom':
        if (!state.showAll) return null;
        return divider(entry, 'Extension state: ' + str(entry.customType), entry.data);
      default:
        return divider(entry, 'Entry of type ' + (str(entry.type) || '(none)'), entry);
    }
  }

  function forkBar(parentId, kids, nextId) {
    var bar = el('div', 'fork-bar');
    bar.appendChild(el('span', 'fork-title', plural(kids.length, 'branch', 'branches') + ' continue here:'));
    kids.forEach(function (kid) {
      var info = summarize(byId.get(kid));
      var leaf = newestLeafUnder(kid);
      var button = el('button', 'fork-choice' + (kid === nextId ? ' current' : '') + (activePath.has(kid) ? ' active' : ''));
      button.type = 'button';
      button.textContent = oneLine(plainText(info.text), 48) || info.tag;
      button.title = 'Show the branch ending at ' + leaf + (activePath.has(kid) ? ' (active branch)' : '');
      button.addEventListener('click', function () {
        state.shownLeaf = leaf;
        state.selected = kid;
        renderConversation(kid);
      });
      bar.appendChild(button);
    });
    return bar;
  }

  function renderConversation(focusId) {
    var ids = state.shownLeaf === null ? [] : pathTo(state.shownLeaf);
    var results = new Map();
    var attached = new Set();
    ids.forEach(function (id) {
      var msg = byId.get(id).message;
      if (byId.get(id).type === 'message' && isObj(msg) && msg.role === 'toolResult' &&
        typeof msg.toolCallId === 'string' && !results.has(msg.toolCallId)) {
        results.set(msg.toolCallId, msg);
      }
    });
    ids.forEach(function (id) {
      var msg = byId.get(id).message;
      if (isObj(msg) && msg.role === 'assistant' && Array.isArray(msg.content)) {
        msg.content.forEach(function (block) {
          if (isObj(block) && block.type === 'toolCall' && results.has(str(block.id))) attached.add(str(block.id));
        });
      }
    });
    var box = document.getElementById('messages');
    box.textContent = '';
    if (!ids.length) box.appendChild(el('p', 'muted', 'This session has no entries yet.'));
    ids.forEach(function (id, k) {
      var node = renderEntry(byId.get(id), results, attached);
      if (node) box.appendChild(node);
      var kids = kidsOf(id);
      if (kids.length > 1) box.appendChild(forkBar(id, kids, ids[k + 1]));
    });
    renderBranchNote(ids);
    refreshTree();
    if (focusId) {
      var target = document.getElementById('entry-' + focusId) || nearestShown(focusId);
      if (target) {
        target.scrollIntoView({ block: 'start' });
        target.classList.add('flash');
        setTimeout(function () {
          target.classList.remove('flash');
        }, 1600);
      }
    }
  }

  // A hidden entry (e.g. a label) has no element; its closest shown ancestor stands in.
  function nearestShown(id) {
    var path = pathTo(id);
    for (var k = path.length - 1; k >= 0; k--) {
      var node = document.getElementById('entry-' + path[k]);
      if (node) return node;
    }
    return null;
  }

  function renderBranchNote(ids) {
    var note = document.getElementById('branch-note');
    note.textContent = '';
    var onActive = state.shownLeaf === activeLeaf;
    note.className = onActive ? 'note-active' : 'note-other';
    if (onActive) {
      note.appendChild(el('span', null, 'Active branch \u00b7 ' + plural(ids.length, 'entry', 'entries') +
        (activeLeaf ? ' \u00b7 leaf ' + activeLeaf : '')));
    } else {
      note.appendChild(el('span', null, 'Viewing another branch (leaf ' + state.shownLeaf + '), not the active one.'));
      var back = el('button', 'link-button', 'Back to the active branch');
      back.type = 'button';
      back.addEventListener('click', showActive);
      note.appendChild(back);
    }
  }

  function select(id, scroll) {
    state.selected = id;
    if (!new Set(pathTo(state.shownLeaf)).has(id)) state.shownLeaf = newestLeafUnder(id);
    renderConversation(scroll ? id : null);
    revealTreeRow(id);
    if (!scroll) {
      var node = document.getElementById('entry-' + id);
      if (node) node.classList.add('flash');
    }
  }

  // Scrolls only the tree list: scrollIntoView would also move the page under the sticky panel.
  function revealTreeRow(id) {
    var row = treeRows.get(id);
    var list = document.getElementById('tree');
    if (!row || !list) return;
    var top = row.li.offsetTop - list.offsetTop;
    if (top < list.scrollTop || top > list.scrollTop + list.clientHeight - row.li.offsetHeight) {
      list.scrollTop = Math.max(0, top - list.clientHeight / 3);
    }
  }

  function showActive() {
    state.shownLeaf = activeLeaf;
    state.selected = null;
    renderConversation(null);
    window.scrollTo(0, 0);
  }

  // ---------------------------------------------------------------- header

  function metaRow(list, name, value) {
    if (!value) return;
    list.appendChild(el('dt', null, name));
    list.appendChild(el('dd', null, value));
  }

  function renderHeader() {
    var box = document.getElementById('session-header');
    var title = sessionName || 'pi session';
    box.appendChild(el('h1', null, title));
    document.title = sessionName ? sessionName + ' \u00b7 pi session' : 'pi session ' + str(header.id).slice(0, 13);

    var meta = el('dl', 'meta');
    metaRow(meta, 'Session', str(header.id));
    metaRow(meta, 'Started', formatTime(header.timestamp));
    metaRow(meta, 'Directory', str(header.cwd));
    metaRow(meta, 'Forked from', str(header.parentSession));
    box.appendChild(meta);

    var counts = { user: 0, assistant: 0, tools: 0, errors: 0, input: 0, output: 0, cacheRead: 0, cacheWrite: 0, cost: 0 };
    var models = [];
    entries.forEach(function (entry) {
      var msg = entry.message;
      if (entry.type !== 'message' || !isObj(msg)) return;
      if (msg.role === 'user') counts.user++;
      if (msg.role === 'toolResult' && msg.isError) counts.errors++;
      if (msg.role !== 'assistant') return;
      counts.assistant++;
      if (Array.isArray(msg.content)) {
        counts.tools += msg.content.filter(function (b) { return isObj(b) && b.type === 'toolCall'; }).length;
      }
      var model = [str(msg.provider), str(msg.model)].filter(Boolean).join('/');
      if (model && models.indexOf(model) < 0) models.push(model);
      if (isObj(msg.usage)) {
        counts.input += num(msg.usage.input);
        counts.output += num(msg.usage.output);
        counts.cacheRead += num(msg.usage.cacheRead);
        counts.cacheWrite += num(msg.usage.cacheWrite);
        if (isObj(msg.usage.cost)) counts.cost += num(msg.usage.cost.total);
      }
    });
    var stats = el('div', 'stats');
    [
      [plural(counts.user, 'user message'), ''],
      [plural(counts.assistant, 'assistant reply', 'assistant replies'), ''],
      [plural(counts.tools, 'tool call') + (counts.errors ? ' (' + counts.errors + ' failed)' : ''), ''],
      ['tokens in ' + formatTokens(counts.input) + ' \u00b7 out ' + formatTokens(counts.output), 'Totals over all branches'],
      [counts.cacheRead || counts.cacheWrite ? 'cache read ' + formatTokens(counts.cacheRead) + ' \u00b7 write ' + formatTokens(counts.cacheWrite) : '', ''],
      [counts.cost ? formatCost(counts.cost) : '', 'Total cost over all branches'],
      [models.join(', '), 'Models used']
    ].forEach(function (pair) {
      if (!pair[0]) return;
      var chip = el('span', 'stat', pair[0]);
      if (pair[1]) chip.title = pair[1];
      stats.appendChild(chip);
    });
    box.appendChild(stats);

    var prompt = str(data.systemPrompt);
    if (prompt) {
      var promptBox = details('System prompt (' + prompt.length.toLocaleString('en-US') + ' characters)', false, 'system-prompt');
      promptBox.appendChild(el('pre', 'prompt-text', prompt));
      box.appendChild(promptBox);
    }
    var tools = Array.isArray(data.tools) ? data.tools.filter(isObj) : [];
    if (tools.length) {
      var toolsBox = details('Tools (' + tools.length + '): ' + tools.map(function (t) { return str(t.name); }).join(', '), false, 'tool-list');
      tools.forEach(function (tool) {
        toolsBox.appendChild(renderToolSpec(tool));
      });
      box.appendChild(toolsBox);
    }
  }

  function schemaType(schema) {
    if (!isObj(schema)) return '';
    if (Array.isArray(schema.enum)) return schema.enum.map(function (v) { return JSON.stringify(v); }).join(' | ');
    if (schema.const !== undefined) return JSON.stringify(schema.const);
    var variants = schema.anyOf || schema.oneOf;
    if (Array.isArray(variants)) return variants.map(schemaType).filter(Boolean).join(' | ');
    var type = Array.isArray(schema.type) ? schema.type.join(' | ') : str(schema.type);
    if (type === 'array' && isObj(schema.items)) return schemaType(schema.items) + '[]';
    return type;
  }

  function renderToolSpec(tool) {
    var card = el('div', 'tool-spec');
    card.appendChild(el('div', 'tool-spec-name', str(tool.name)));
    if (str(tool.description)) card.appendChild(el('div', 'tool-spec-desc', str(tool.description)));
    var params = isObj(tool.parameters) ? tool.parameters : {};
    var props = isObj(params.properties) ? params.properties : {};
    var required = Array.isArray(params.required) ? params.required : [];
    var names = Object.keys(props);
    if (names.length) {
      var tableNode = el('table', 'params');
      var headRow = el('tr');
      ['parameter', 'type', '', 'description'].forEach(function (h) { headRow.appendChild(el('th', null, h)); });
      tableNode.appendChild(add(el('thead'), headRow));
      var tbody = el('tbody');
      names.forEach(function (name) {
        var schema = isObj(props[name]) ? props[name] : {};
        var row = el('tr');
        row.appendChild(add(el('td'), el('code', null, name)));
        row.appendChild(el('td', 'param-type', schemaType(schema)));
        row.appendChild(el('td', 'param-req', required.indexOf(name) >= 0 ? 'required' : 'optional'));
        var desc = str(schema.description);
        if (schema.default !== undefined) desc += (desc ? ' ' : '') + '(default ' + JSON.stringify(schema.default) + ')';
        row.appendChild(el('td', 'param-desc', desc));
        tbody.appendChild(row);
      });
      tableNode.appendChild(tbody);
      card.appendChild(add(el('div', 'table-wrap'), tableNode));
    } else {
      card.appendChild(el('div', 'muted small', 'No parameters.'));
    }
    var schemaBox = details('JSON schema', false, 'schema');
    schemaBox.appendChild(el('pre', 'output', pretty(tool.parameters)));
    card.appendChild(schemaBox);
    return card;
  }

  // ---------------------------------------------------------------- start

  function wireControls() {
    document.getElementById('show-active').addEventListener('click', showActive);
    var all = document.getElementById('show-all-entries');
    all.addEventListener('change', function () {
      state.showAll = all.checked;
      renderConversation(null);
    });
    var filter = document.getElementById('tree-filter');
    filter.addEventListener('input', function () {
      state.filter = filter.value.trim().toLowerCase();
      refreshTree();
    });
  }

  function start() {
    if (loadError) throw loadError;
    renderHeader();
    buildTree();
    wireControls();
    var wanted = /^#entry-(.+)$/.exec(window.location.hash || '');
    var target = wanted ? decodeURIComponent(wanted[1]) : null;
    if (target && byId.has(target)) {
      select(target, true);
    } else {
      renderConversation(null);
    }
    document.body.setAttribute('data-rendered', 'ok');
  }

  try {
    start();
  } catch (err) {
    document.body.setAttribute('data-render-error', String(err && err.message || err));
    var box = document.getElementById('messages') || document.body;
    box.appendChild(el('div', 'error-box', 'This export could not be displayed: ' + String(err && err.message || err)));
    if (window.console) window.console.error(err);
  }
})();
