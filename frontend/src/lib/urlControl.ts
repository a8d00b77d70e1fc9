/** How a control (filter, checkbox, select, slider) writes its state into the URL: in place, so that no
 * history entry is made per change, and at once. React Router commits a navigation in a transition, which a
 * busy page renders later; until then a checkbox or select bound to the URL shows its old value again (seen
 * on a loaded machine: a click on "show archived" read back as unchecked). */
export const URL_CONTROL = { replace: true, flushSync: true } as const;
