// A JAX-WS client of the cddlm portal, compiled against the classes wsimport generates from
// the served WSDL (tests/test_java_client.py). Each step prints one line the test checks.
// Arguments: the WSDL URL, an application name.

import java.io.StringWriter;
import java.net.URL;
import java.util.List;

import javax.xml.bind.JAXBElement;
import javax.xml.namespace.QName;
import javax.xml.transform.stream.StreamResult;
import javax.xml.ws.wsaddressing.W3CEndpointReference;

import org.gridforum.cddlm.deployapi._2005._02.CreateRequest;
import org.gridforum.cddlm.deployapi._2005._02.CreateResponse;
import org.gridforum.cddlm.deployapi._2005._02.EmptyType;
import org.gridforum.cddlm.deployapi._2005._02.LookupRequest;
import org.gridforum.cddlm.deployapi._2005._02.ReferenceHolderType;
import org.gridforum.cddlm.deployapi._2005._02.StaticInfo;
import org.gridforum.cddlm.deployapi._2005._02.TerminateRequest;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.ApiNoSuchApplicationFault;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.ApiWrongStateFault;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.Application;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.ApplicationService;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.Portal;
import org.gridforum.cddlm.deployapi._2005._02.wsdl.PortalService;

public class CddlmClient {
    static final String API = "http://www.gridforum.org/cddlm/deployapi/2005/02";

    static String address(W3CEndpointReference epr) {
        StringWriter out = new StringWriter();
        epr.writeTo(new StreamResult(out));
        String xml = out.toString();
        int start = xml.indexOf("Address>") + "Address>".length();
        return xml.substring(start, xml.indexOf("<", start));
    }

    static String value(List<Object> any) {
        Object first = any.get(0);
        if (first instanceof JAXBElement) {
            Object v = ((JAXBElement<?>) first).getValue();
            return v instanceof Enum ? ((Enum<?>) v).name().toLowerCase() : String.valueOf(v);
        }
        return ((org.w3c.dom.Element) first).getTextContent();
    }

    static String state(Application app) throws Exception {
        return value(app.getResourceProperty(new QName(API, "state")).getAny());
    }

    public static void main(String[] args) throws Exception {
        URL wsdl = new URL(args[0]);
        Portal portal = new PortalService(wsdl).getPortalPort();
        ApplicationService applications = new ApplicationService(wsdl);

        CreateRequest create = new CreateRequest();
        create.setName(args[1]);
        CreateResponse created = portal.create(create);
        System.out.println("created " + created.getResourceId() + " "
                           + address(created.getApplicationReference()));

        LookupRequest lookup = new LookupRequest();
        lookup.setName(args[1]);
        ReferenceHolderType found = portal.lookup(lookup);
        System.out.println("lookup " + address(found.getApplicationReference()));

        // the EPR's reference parameters (api:ResourceId) travel as headers from here on
        Application app = applications.getPort(found.getApplicationReference(), Application.class);
        System.out.println("state " + state(app));
        StaticInfo info = (StaticInfo) portal.getResourceProperty(new QName(API, "staticInfo"))
            .getAny().get(0);
        System.out.println("static-info " + info.getName() + " " + info.getLocation());

        try {
            app.destroy(new EmptyType());
            System.out.println("destroy-while-live accepted");
        } catch (ApiWrongStateFault e) {
            System.out.println("destroy-while-live WrongStateFault "
                               + e.getFaultInfo().getState().value() + " "
                               + e.getFaultInfo().getOperation());
        }

        TerminateRequest terminate = new TerminateRequest();
        terminate.setReason("java client done");
        app.terminate(terminate);
        String s = state(app);
        for (int i = 0; i < 200 && !s.equals("terminated"); i++) {
            Thread.sleep(50);
            s = state(app);
        }
        System.out.println("state " + s);
        app.destroy(new EmptyType());
        System.out.println("destroyed");
        try {
            portal.lookup(lookup);
            System.out.println("lookup-after found");
        } catch (ApiNoSuchApplicationFault e) {
            System.out.println("lookup-after NoSuchApplicationFault");
        }
    }
}
