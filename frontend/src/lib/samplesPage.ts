/** What the Samples page's count line says: which answers of the step are on the page, and how they group. */

const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`;

/**
 * `total` answers match the filters; the page (`pageSize` a page) shows `shown` of them from `skip` on, in groups
 * (one per prompt asked, each with its answers) of `groupSizes`. E.g. "answers 1–200 of 256 (page 1 of 2) · on this page:
 * 200 prompts, 1 answer each".
 */
export function pageSummary(total: number, pageSize: number, skip: number, shown: number, groupSizes: readonly number[]): string {
  const head = shown >= total ? `${plural(total, "answer")}` : `answers ${skip + 1}–${skip + shown} of ${total.toLocaleString("en-US")}`
    + ` (page ${Math.floor(skip / pageSize) + 1} of ${Math.ceil(total / pageSize)})`;
  if (groupSizes.length === 0) return head;
  const lo = Math.min(...groupSizes);
  const hi = Math.max(...groupSizes);
  const each = lo === hi ? `${plural(lo, "answer")} each` : `${lo}–${hi} answers each`;
  return `${head}${shown >= total ? " to" : " · on this page:"} ${plural(groupSizes.length, "prompt")}, ${each}`;
}
