// A foreign CDDLM portal for the tests: another implementation on another SOAP stack
// (node-soap's server), so that delegation is proven against something that is not cddlm.
//
// It implements create, lookup, initialize, run, ping, resolve, terminate, destroy and
// GetResourceProperty, and behaves as a plain implementation may under the spec:
//   - it ignores every option (it lists none in api:staticInfo), the client-token too;
//   - it serves no WSDL: GET ?wsdl answers 404;
//   - its faults are plain SOAP 1.1 faults, never WS-BaseFaults;
//   - POST /control/mode with "503" makes every SOAP request answer an HTTP 503 HTML page
//     ("ok" again: normal), "hold-create" holds each createRequest's answer until "ok".
// A descriptor whose text holds "refuse-plain" is refused with a fault whose detail is not a
// BaseFault, "refuse-bare" with a fault without detail, "refuse-503" with an HTTP 503 page.
// GET /control/log answers every request received (method, path, SOAPAction, raw XML) as JSON;
// GET /control/apps the applications it holds.
//
// usage: node portal.js PORT   (prints "foreign portal ready at URL" once it listens)
'use strict';

const http = require('http');
const EventEmitter = require('events');
const crypto = require('crypto');
const soap = require('soap');

const API = 'http://www.gridforum.org/cddlm/deployapi/2005/02';
const RP = 'http://docs.oasis-open.org/wsrf/rp-2';
const WSA = 'http://www.w3.org/2005/08/addressing';
const WSNT = 'http://docs.oasis-open.org/wsn/b-2';
const PATH = '/foreign/portal';
const OPS = ['create', 'lookup', 'initialize', 'run', 'ping', 'resolve', 'terminate', 'destroy'];

// its own small WSDL (never served): one portType, elements left untyped
const WSDL = `<?xml version="1.0" encoding="UTF-8"?>
<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/" xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:api="${API}" xmlns:rp="${RP}" xmlns:wsnt="${WSNT}" xmlns:tns="urn:foreign:portal"
    targetNamespace="urn:foreign:portal">
  <wsdl:types>
    <xsd:schema targetNamespace="${API}" elementFormDefault="qualified">
      ${OPS.map((o) => `<xsd:element name="${o}Request"/><xsd:element name="${o}Response"/>`).join('\n      ')}
    </xsd:schema>
    <xsd:schema targetNamespace="${RP}" elementFormDefault="qualified">
      <xsd:element name="GetResourceProperty"/><xsd:element name="GetResourcePropertyResponse"/>
    </xsd:schema>
    <xsd:schema targetNamespace="${WSNT}" elementFormDefault="qualified">
      <xsd:element name="Subscribe"/><xsd:element name="SubscribeResponse"/>
    </xsd:schema>
  </wsdl:types>
  ${OPS.map((o) => `<wsdl:message name="${o}In"><wsdl:part name="p" element="api:${o}Request"/></wsdl:message>
  <wsdl:message name="${o}Out"><wsdl:part name="p" element="api:${o}Response"/></wsdl:message>`).join('\n  ')}
  <wsdl:message name="grpIn"><wsdl:part name="p" element="rp:GetResourceProperty"/></wsdl:message>
  <wsdl:message name="grpOut"><wsdl:part name="p" element="rp:GetResourcePropertyResponse"/></wsdl:message>
  <wsdl:message name="subIn"><wsdl:part name="p" element="wsnt:Subscribe"/></wsdl:message>
  <wsdl:message name="subOut"><wsdl:part name="p" element="wsnt:SubscribeResponse"/></wsdl:message>
  <wsdl:portType name="Foreign">
    ${OPS.map((o) => `<wsdl:operation name="${o}"><wsdl:input message="tns:${o}In"/><wsdl:output message="tns:${o}Out"/></wsdl:operation>`).join('\n    ')}
    <wsdl:operation name="GetResourceProperty"><wsdl:input message="tns:grpIn"/><wsdl:output message="tns:grpOut"/></wsdl:operation>
    <wsdl:operation name="Subscribe"><wsdl:input message="tns:subIn"/><wsdl:output message="tns:subOut"/></wsdl:operation>
  </wsdl:portType>
  <wsdl:binding name="ForeignBinding" type="tns:Foreign">
    <soap:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    ${OPS.concat(['GetResourceProperty', 'Subscribe']).map((o) => `<wsdl:operation name="${o}"><soap:operation soapAction="${o}"/><wsdl:input><soap:body use="literal"/></wsdl:input><wsdl:output><soap:body use="literal"/></wsdl:output></wsdl:operation>`).join('\n    ')}
  </wsdl:binding>
  <wsdl:service name="ForeignService">
    <wsdl:port name="ForeignPort" binding="tns:ForeignBinding"><soap:address location="http://localhost${PATH}"/></wsdl:port>
  </wsdl:service>
</wsdl:definitions>`;

const apps = new Map();          // id -> {id, name, state, language, version, text, reason, failed}
const received = [];             // every request, for the tests to read
let mode = 'ok';
const held = [];                 // create answers held while mode is hold-create

function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function plainFault(text, detailXml) {
  const fault = { faultcode: 'soap:Client', faultstring: text, statusCode: 500 };
  if (detailXml) fault.detail = { $xml: detailXml };
  return { Fault: fault };
}

let base = '';
function epr(app) {
  return `<api:applicationReference xmlns:api="${API}" xmlns:wsa="${WSA}"><wsa:Address>${base}${PATH}</wsa:Address>` +
    `<wsa:ReferenceParameters><api:ResourceId>${app.id}</api:ResourceId></wsa:ReferenceParameters></api:applicationReference>`;
}

function body(name, inner, ns = API) {
  return { _xml: `<r:${name} xmlns:r="${ns}">${inner || ''}</r:${name}>` };
}

function text(value) {
  if (value === undefined || value === null) return '';
  if (typeof value === 'object') return String(value.$value !== undefined ? value.$value : '');
  return String(value);
}

function target(headers) {
  const id = text(headers && headers.ResourceId).trim();
  const app = apps.get(id);
  if (!app) throw plainFault('no application ' + (id || '(no ResourceId header)'));
  return app;
}

function needs(app, from, op) {
  if (!from.includes(app.state)) throw plainFault(`${op} is not allowed in state ${app.state}`);
}

function attr(xml, element, name) {
  const m = new RegExp(`<(?:\\w+:)?${element}\\b[^>]*\\s${name}="([^"]*)"`).exec(xml);
  return m ? m[1] : null;
}

const services = { ForeignService: { ForeignPort: {
  create(args, cb) {
    const name = text(args && args.name).trim() || null;
    if (name && [...apps.values()].some((a) => a.name === name && a.state !== 'terminated')) {
      throw plainFault('the name ' + name + ' is in use');
    }
    const app = { id: 'urn:uuid:' + crypto.randomUUID(), name, state: 'instantiated' };
    apps.set(app.id, app);
    const answer = () => cb(null, body('createResponse',
      `<r:ResourceId>${app.id}</r:ResourceId>${epr(app)}`));
    if (mode === 'hold-create') held.push(answer); else answer();
  },
  lookup(args) {
    const name = text(args && args.name).trim();
    const id = text(args && args.ResourceId).trim();
    const app = [...apps.values()].find((a) => (id && a.id === id) || (name && a.name === name));
    if (!app) throw plainFault('no application ' + (name || id));
    return body('lookupResponse', epr(app));
  },
  initialize(args, cb, headers, req) {
    const app = target(headers);
    needs(app, ['instantiated'], 'initialize');
    const xml = req.body.toString();
    const language = attr(xml, 'descriptor', 'language');
    if (!language) throw plainFault('a descriptor names its language');
    const words = text(args && args.descriptor && args.descriptor.text);
    if (words.includes('refuse-plain')) {
      throw plainFault('the descriptor is refused',
        '<f:Problem xmlns:f="urn:foreign:1"><f:why>refuse-plain asked for</f:why></f:Problem>');
    }
    if (words.includes('refuse-bare')) throw plainFault('the descriptor is refused, bare');
    Object.assign(app, { language, version: attr(xml, 'descriptor', 'version'), text: words,
      state: 'initialized' });
    return body('initializeResponse');
  },
  run(args, cb, headers) {
    const app = target(headers);
    needs(app, ['initialized', 'running'], 'run');
    app.state = app.text.includes('fail-on-run') ? 'failed' : 'running';
    if (app.state === 'failed') app.reason = 'it failed as its descriptor asked';
    return body('runResponse');
  },
  ping(args, cb, headers) {
    const app = target(headers);
    let info = '';
    if (app.state === 'failed' || app.state === 'terminated') {
      info = `<r:terminationInfo><r:normal>${app.state === 'terminated' && !app.failed}</r:normal>` +
        (app.reason ? `<r:reason>${esc(app.reason)}</r:reason>` : '') + '</r:terminationInfo>';
    }
    return body('pingResponse', `<r:state>${app.state}</r:state>${info}`);
  },
  resolve(args, cb, headers) {
    const app = target(headers);
    const path = text(args && args.path);
    if (path !== 'name') throw plainFault('cannot resolve ' + path);
    return body('resolveResponse', `<r:value>${esc(app.name || '')}</r:value>`);
  },
  terminate(args, cb, headers) {
    const app = target(headers);
    if (app.state !== 'terminated') {
      app.failed = app.state === 'failed';
      app.reason = app.reason || text(args && args.reason) || 'terminated';
      app.state = 'terminated';
    }
    return body('terminateResponse');
  },
  destroy(args, cb, headers) {
    const app = target(headers);
    needs(app, ['terminated'], 'destroy');
    apps.delete(app.id);
    return body('destroyResponse');
  },
  GetResourceProperty(args, cb, headers, req) {
    const qname = (/<(?:\w+:)?GetResourceProperty\b[^>]*>([^<]*)</.exec(req.body.toString()) || [])[1] || "";
    const local = qname.trim().split(':').pop();
    const inner = {
      CurrentTime: () => `<rl:CurrentTime xmlns:rl="http://docs.oasis-open.org/wsrf/rl-2">${new Date().toISOString()}</rl:CurrentTime>`,
      staticInfo: () => `<api:staticInfo xmlns:api="${API}"><api:name>foreign</api:name><api:version>0</api:version>` +
        `<api:build>test</api:build><api:home>urn:foreign</api:home><api:location>loopback</api:location>` +
        `<api:languages/><api:notifications/><api:options/></api:staticInfo>`,
      applications: () => `<api:applications xmlns:api="${API}">${[...apps.values()].map(epr).join('')}</api:applications>`,
      state: () => `<api:state xmlns:api="${API}">${target(headers).state}</api:state>`,
      id: () => `<api:id xmlns:api="${API}">${target(headers).id}</api:id>`,
    }[local];
    if (!inner) throw plainFault('no property ' + qname);
    return body('GetResourcePropertyResponse', inner(), RP);
  },
  Subscribe() {
    throw plainFault('this portal takes no subscriptions');
  },
} } };

const soapSide = new EventEmitter();     // node-soap attaches to this; requests come through us

function control(req, res, data) {
  res.setHeader('Content-Type', 'application/json');
  if (req.method === 'POST' && req.url === '/control/mode') {
    mode = data.toString().trim();
    if (mode === 'ok') held.splice(0).forEach((answer) => answer());
    res.end(JSON.stringify({ mode }));
  } else if (req.url === '/control/log') {
    res.end(JSON.stringify(received));
  } else if (req.url === '/control/apps') {
    res.end(JSON.stringify([...apps.values()]));
  } else {
    res.statusCode = 404;
    res.end('{}');
  }
}

function unavailable(res) {
  res.writeHead(503, { 'Content-Type': 'text/html' });
  res.end('<html><head><title>503 Service Unavailable</title></head><body><h1>Service ' +
    'Unavailable</h1><p>The server is temporarily unable to service your request.</p></body></html>');
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const data = Buffer.concat(chunks);
    if (req.url.startsWith('/control/')) return control(req, res, data);
    if (req.method === 'GET' || req.url.includes('?')) {   // no WSDL here, nor anything else
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end('not found');
    }
    received.push({ method: req.method, path: req.url, soapaction: req.headers.soapaction || null,
      xml: data.toString() });
    if (mode === '503' || (/initializeRequest/.test(data) && /refuse-503/.test(data))) {
      return unavailable(res);
    }
    // node-soap routes on the body element; our own SOAPAction values are not the caller's
    delete req.headers.soapaction;
    req.body = data;
    soapSide.emit('request', req, res);
  });
});

const port = Number(process.argv[2] || 0);
server.listen(port, '127.0.0.1', () => {
  base = `http://127.0.0.1:${server.address().port}`;
  soap.listen(soapSide, { path: PATH, services, xml: WSDL, callback: (err) => {
    if (err) { console.error(err); process.exit(1); }
    console.log(`foreign portal ready at ${base}${PATH}`);
  } });
});
process.on('SIGTERM', () => process.exit(0));
