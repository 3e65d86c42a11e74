<?php
// A PHP SoapClient of the cddlm portal, built from the served WSDL alone (tests/interop).
// Arguments: the portal's URL, an application name, the descriptor (XML text).
// Each step prints one line that tests/interop/test_php.py checks.
const API = 'http://www.gridforum.org/cddlm/deployapi/2005/02';
const RP = 'http://docs.oasis-open.org/wsrf/rp-2';
const NATIVE = 'urn:cddlm:lang:components:1';
[, $url, $name, $descriptor] = $argv;

function text($v) {               // a simple value, or an object whose text is `_`
    return is_object($v) ? $v->_ : $v;
}

// PHP merges the operations of every port into one client: __setLocation picks the endpoint
$client = new SoapClient($url . '?wsdl', ['exceptions' => true, 'cache_wsdl' => WSDL_CACHE_NONE]);
function application($client, $ref, $rid) {
    $client->__setLocation(text($ref->Address));
    // the EPR's reference parameter goes back as a SOAP header on every request to its address
    $client->__setSoapHeaders([new SoapHeader(API, 'ResourceId', $rid)]);
}

function state($client) {
    // ext-soap writes a QName's text without declaring its prefix: send the element raw
    $request = new SoapVar('<rp:GetResourceProperty xmlns:rp="' . RP . '" xmlns:api="' . API
                           . '">api:state</rp:GetResourceProperty>', XSD_ANYXML);
    $any = $client->GetResourceProperty($request)->any;
    return trim(strip_tags(is_array($any) ? implode('', $any) : $any));
}

function wait_for($client, $want) {
    $now = state($client);
    for ($i = 0; $i < 600 && $now !== $want && $now !== 'failed'; $i++) {
        usleep(100000);
        $now = state($client);
    }
    echo "state $now\n";
}

function initialize($client, $xml) {
    $client->initialize(['descriptor' => ['language' => NATIVE, 'body' => ['any' => $xml]]]);
}

$created = $client->create(['name' => $name]);
$ref = $created->applicationReference;
echo 'created ', $created->ResourceId, ' ', text($ref->Address), "\n";
application($client, $ref, $created->ResourceId);
initialize($client, $descriptor);
wait_for($client, 'initialized');
$client->run([]);
wait_for($client, 'running');
echo 'resolved ', text($client->resolve(['path' => 'nap/state'])->value), "\n";
$client->terminate(['reason' => 'PHP is done']);
wait_for($client, 'terminated');
$client->destroy([]);
echo "destroyed\n";

$client->__setLocation($url);
$client->__setSoapHeaders(null);
$again = $client->create(['name' => $name . '-bad']);
application($client, $again->applicationReference, $again->ResourceId);
try {
    initialize($client, '<application xmlns="' . NATIVE
                        . '"><component name="x" type="no-such-type"/></application>');
    echo "fault none\n";
} catch (SoapFault $e) {
    echo 'fault ', array_keys(get_object_vars($e->detail))[0], ' ', $e->getMessage(), "\n";
}
