/**
 * Dynamic prompts (`a {red|blue} cat`) as the graph editor resolves them when it queues a workflow: in text
 * inputs whose definition asks for `dynamicPrompts`, one option of each group chosen at random. Text from a
 * msg or the editor is untrusted: resolved in linear time, without recursion, and bounded in length and depth.
 * Pure, no I/O.
 */
import { invalidInput } from '../../http/errors';

/** Dynamic-prompt text longer than this is refused (a prompt is a few hundred characters; this is a book). */
export const MAX_DYNAMIC_PROMPT_CHARS = 256 * 1024;
/** `{a|{b|c}}` groups nested deeper than this are refused (prompts nest two or three levels). */
export const MAX_DYNAMIC_PROMPT_DEPTH = 64;

/** Where a `//` comment ends: what `.` does not match. */
const LINE_END = /[\n\r\u2028\u2029]/g;

/**
 * C-style comments removed as the editor's `/\/\*[\s\S]*?\*\/|\/\/.*\/g` does, in one pass: that pattern
 * scans to the end of the text from every `/*` that is never closed, which is quadratic in the text.
 */
function withoutComments(text: string): string {
  let result = '';
  let at = 0;
  // Once no `*/` follows, no later `/*` can close either.
  let closable = true;
  while (at < text.length) {
    const comment = text.indexOf('/', at);
    if (comment === -1 || comment === text.length - 1) break;
    const next = text[comment + 1];
    if (next === '*' && closable) {
      const close = text.indexOf('*/', comment + 2);
      if (close !== -1) {
        result += text.slice(at, comment);
        at = close + 2;
        continue;
      }
      closable = false;
    } else if (next === '/') {
      result += text.slice(at, comment);
      LINE_END.lastIndex = comment;
      at = LINE_END.exec(text)?.index ?? text.length;
      continue;
    }
    result += text.slice(at, comment + 1);
    at = comment + 1;
  }
  return result + text.slice(at);
}

/** A `{...}` group of dynamic-prompt text: where each option starts and ends, and where the group ends. */
interface PromptGroup {
  options: Array<[start: number, end: number]>;
  end: number;
}

/**
 * Dynamic-prompt text as the editor sends it: C-style comments removed, each `{a|b|c}` group replaced by one of
 * its options (nested groups allowed, an unclosed group running to the end), `\{`, `\}` and `\|` kept as the
 * plain characters. One pass finds the groups, a second walks only the chosen options: linear in the text
 * however deep the groups nest, and no recursion. Refuses (invalid_input) text over
 * MAX_DYNAMIC_PROMPT_CHARS or groups nested over MAX_DYNAMIC_PROMPT_DEPTH. The editor resolves each chosen
 * option again, unescaping once per level; here the escapes are undone once, which differs only for a
 * backslash written right before an escaped `\{`, `\}` or `\|` inside a group.
 */
export function resolveDynamicPrompt(text: string, random: () => number = Math.random): string {
  if (text.length > MAX_DYNAMIC_PROMPT_CHARS) {
    throw invalidInput(
      `the dynamic prompt is ${text.length} characters long, more than the ${MAX_DYNAMIC_PROMPT_CHARS} it may have: shorten it`,
    );
  }
  const source = withoutComments(text);
  const groups = new Map<number, PromptGroup>();
  const open: Array<{ group: PromptGroup; optionStart: number }> = [];
  for (let at = 0; at < source.length; at++) {
    const char = source[at];
    if (char === '\\') {
      at++;
    } else if (char === '{') {
      if (open.length === MAX_DYNAMIC_PROMPT_DEPTH) {
        throw invalidInput(
          `the dynamic prompt nests {…|…} groups more than ${MAX_DYNAMIC_PROMPT_DEPTH} deep: write it with fewer levels`,
        );
      }
      const group: PromptGroup = { options: [], end: source.length };
      groups.set(at, group);
      open.push({ group, optionStart: at + 1 });
    } else if (open.length > 0 && (char === '|' || char === '}')) {
      const innermost = open[open.length - 1];
      innermost.group.options.push([innermost.optionStart, at]);
      innermost.optionStart = at + 1;
      if (char === '}') {
        innermost.group.end = at + 1;
        open.pop();
      }
    }
  }
  for (const { group, optionStart } of open) group.options.push([optionStart, source.length]);

  let result = '';
  let at = 0;
  let end = source.length;
  // Where to go on once a chosen option is written out: after its group, within the enclosing option.
  const after: Array<{ at: number; end: number }> = [];
  for (;;) {
    if (at >= end) {
      const outer = after.pop();
      if (!outer) break;
      ({ at, end } = outer);
      continue;
    }
    const char = source[at];
    const group = char === '{' ? groups.get(at) : undefined;
    if (group) {
      const [start, stop] = group.options[Math.floor(random() * group.options.length)] ?? [at, at];
      after.push({ at: group.end, end });
      at = start;
      end = stop;
    } else if (char === '\\') {
      result += `\\${source[at + 1] ?? ''}`;
      at += 2;
    } else {
      result += char;
      at++;
    }
  }
  return result.replace(/\\([{}|])/g, '$1');
}
