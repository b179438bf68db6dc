// evaluate.mjs evaluates flags through OpenFeature's OFREP server provider
// (@openfeature/ofrep-provider with @openfeature/server-sdk) and prints one
// JSON line per flag: {"flag", "value", "variant", "reason", "errorCode"}.
//
//   node evaluate.mjs BASE_URL CONTEXT_JSON FLAG[:TYPE]...
//
// BASE_URL is where OFREP is served (the provider appends
// /ofrep/v1/evaluate/flags/{key}); CONTEXT_JSON is the evaluation context,
// e.g. {"targetingKey":"user-1","country":"NL"}; TYPE is string (the
// default), boolean, integer, float or object. It exits 2 on bad arguments.
import { OpenFeature } from '@openfeature/server-sdk';
import { OFREPProvider } from '@openfeature/ofrep-provider';

const [baseUrl, contextJSON, ...flags] = process.argv.slice(2);
if (!baseUrl || contextJSON === undefined || flags.length === 0) {
  console.error('usage: node evaluate.mjs BASE_URL CONTEXT_JSON FLAG[:TYPE]...');
  process.exit(2);
}
const context = JSON.parse(contextJSON);

// Each type's getter and the default value it is given.
const getters = {
  string: (c, key) => c.getStringDetails(key, '', context),
  boolean: (c, key) => c.getBooleanDetails(key, false, context),
  integer: (c, key) => c.getNumberDetails(key, 0, context),
  float: (c, key) => c.getNumberDetails(key, 0, context),
  object: (c, key) => c.getObjectDetails(key, {}, context),
};

await OpenFeature.setProviderAndWait(new OFREPProvider({ baseUrl }));
const client = OpenFeature.getClient();
for (const flag of flags) {
  const [key, type = 'string'] = flag.split(':');
  const get = getters[type];
  if (!get) {
    console.error(`flag ${flag}: type ${type}, want one of ${Object.keys(getters).join(', ')}`);
    process.exit(2);
  }
  const d = await get(client, key);
  console.log(JSON.stringify({
    flag: key, value: d.value, variant: d.variant ?? null, reason: d.reason ?? null, errorCode: d.errorCode ?? null,
  }));
}
await OpenFeature.close();
