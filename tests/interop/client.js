// A node-soap client of the cddlm portal, built from the served WSDL alone (tests/interop).
// Arguments: the portal's URL, an application name, the descriptor (XML text).
// Each step prints one line that tests/interop/test_node_soap.py checks.
'use strict';
const soap = require('soap');

const API = 'http://www.gridforum.org/cddlm/deployapi/2005/02';
const NATIVE = 'urn:cddlm:lang:components:1';
const [url, name, descriptor] = process.argv.slice(2);

function text(v) {                // node-soap gives a simple value, or {$value, attributes}
  return v !== null && typeof v === 'object' ? v.$value : v;
}

async function main() {
  const portal = await soap.createClientAsync(url + '?wsdl');
  const [created] = await portal.createAsync({ name });
  const ref = created.applicationReference;
  const address = text(ref.Address);
  console.log('created ' + created.ResourceId + ' ' + address);

  // the EPR's reference parameter goes back as a SOAP header on every request to its address;
  // the client-level methods (createAsync, initializeAsync ...) merge both ports' operations
  const app = await soap.createClientAsync(url + '?wsdl', { endpoint: address });
  app.addSoapHeader('<api:ResourceId xmlns:api="' + API + '">'
                    + text(ref.ReferenceParameters.ResourceId) + '</api:ResourceId>');
  const state = async () => {
    // the QName text's prefix: node-soap declares every xmlns of the WSDL's root element
    const [rp] = await app.GetResourcePropertyAsync({ $value: 'api:state' });
    return text(rp.state);
  };
  const waitFor = async (want) => {
    let now = await state();
    for (let i = 0; i < 600 && now !== want && now !== 'failed'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      now = await state();
    }
    console.log('state ' + now);
  };

  await app.initializeAsync({ descriptor: { attributes: { language: NATIVE },
                                            body: { $xml: descriptor } } });
  await waitFor('initialized');
  await app.runAsync({});
  await waitFor('running');
  const [resolved] = await app.resolveAsync({ path: 'nap/state' });
  console.log('resolved ' + text(resolved.value));
  await app.terminateAsync({ reason: 'node-soap is done' });
  await waitFor('terminated');
  await app.destroyAsync({});
  console.log('destroyed');

  const [again] = await portal.createAsync({ name: name + '-bad' });
  const bad = await soap.createClientAsync(url + '?wsdl', { endpoint: text(again.applicationReference.Address) });
  bad.addSoapHeader('<api:ResourceId xmlns:api="' + API + '">' + again.ResourceId + '</api:ResourceId>');
  try {
    await bad.initializeAsync({
      descriptor: { attributes: { language: NATIVE }, body: { $xml: '<application xmlns="' + NATIVE
        + '"><component name="x" type="no-such-type"/></application>' } } });
    console.log('fault none');
  } catch (err) {
    const fault = err.root.Envelope.Body.Fault;
    console.log('fault ' + Object.keys(fault.detail)[0] + ' ' + fault.faultstring);
  }
}

main().catch((err) => { console.error(err.body || err.stack || err); process.exit(1); });
