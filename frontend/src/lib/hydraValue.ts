/** A config value as the engine's override grammar reads it (engine/config/values.py). The browser has no copy of
 *  that grammar: the New run form asks the server to read typed text (POST /config/values) and to write its
 *  command (POST /config/command). */
export type HydraValue = null | boolean | number | string | HydraValue[] | { [key: string]: HydraValue };
