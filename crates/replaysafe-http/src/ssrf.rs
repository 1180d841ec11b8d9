//! The SSRF guard: endpoints from configuration must not reach internal services.
//!
//! Every HTTP adapter builds its client through [`crate::HttpClient`], which puts this
//! guard on it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Which addresses a client may connect to.
///
/// By default every address that is not globally reachable is refused: loopback,
/// private (RFC 1918), link-local (169.254.0.0/16, where cloud metadata services live,
/// and fe80::/10), shared CGNAT space (100.64.0.0/10), unspecified, unique-local
/// (fc00::/7), IPv4-mapped and IPv4-compatible IPv6, multicast, documentation,
/// benchmarking and reserved ranges (see [`AddressClass`]).
///
/// The check is made on the address actually connected to: host names go through
/// [`SsrfResolver`], which drops refused addresses from every DNS answer (so a name that
/// re-resolves to an internal address, as in DNS rebinding, does not pass), and hosts
/// written as IP literals, which never reach a resolver, are checked with
/// [`SsrfPolicy::check_url`] before the request is made.
///
/// An explicit allow-list opens specific hosts or networks:
///
/// ```
/// use replaysafe_http::{IpNetwork, SsrfPolicy};
///
/// let policy = SsrfPolicy::default()
///     .allow_host("airflow.internal")
///     .allow_network("10.20.0.0/16".parse::<IpNetwork>()?);
/// assert!(policy.check("airflow.internal", "10.1.2.3".parse()?).is_ok());
/// assert!(policy.check("elsewhere.example", "10.20.0.7".parse()?).is_ok());
/// assert!(policy.check("elsewhere.example", "10.1.2.3".parse()?).is_err());
/// assert!(policy.check("elsewhere.example", "93.184.216.34".parse()?).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SsrfPolicy {
    allowed_hosts: Vec<String>,
    allowed_networks: Vec<IpNetwork>,
}

impl SsrfPolicy {
    /// Allows every address `host` resolves to (compared without case; an IP literal
    /// such as `127.0.0.1` or `[::1]` is a host too). A network is not a host: use
    /// [`allow_network`](Self::allow_network), or [`allow`](Self::allow) for text from
    /// configuration that may hold either.
    pub fn allow_host(mut self, host: impl AsRef<str>) -> Self {
        self.allowed_hosts.push(normalize_host(host.as_ref()));
        self
    }

    /// Allows every address in `network`, whatever the host name. The network is taken as
    /// given; text from configuration goes through [`allow`](Self::allow), which refuses
    /// catch-all networks.
    pub fn allow_network(mut self, network: IpNetwork) -> Self {
        self.allowed_networks.push(network);
        self
    }

    /// The default policy with every entry of `entries` let through ([`SsrfPolicy::allow`]),
    /// as a client configuration's `allow_hosts` lists them; a bad entry is a configuration
    /// [`Error`](crate::Error) for `allow_hosts` that names it.
    pub fn allowing<S: AsRef<str>>(entries: &[S]) -> Result<Self, crate::Error> {
        entries
            .iter()
            .try_fold(SsrfPolicy::default(), |policy, entry| {
                policy
                    .allow(entry.as_ref())
                    .map_err(|invalid| crate::Error::config("allow_hosts", invalid.to_string()))
            })
    }

    /// Allows one entry of an allow-list written as text (a command-line flag, a
    /// configuration file): a CIDR network such as `127.0.0.0/8` or `::1/128` is passed
    /// to [`allow_network`](Self::allow_network); a host name or an IP literal to
    /// [`allow_host`](Self::allow_host).
    ///
    /// Anything else is refused rather than kept as a host that could never match: a
    /// malformed network (`10.0.0.0/33`), a wildcard, a URL, an empty entry. So is a network
    /// too broad to be an exception ([`IpNetwork::is_catch_all`]: `0.0.0.0/0`, `::/0`, an
    /// IPv4 prefix shorter than /8, an IPv6 prefix shorter than /32, or IPv4 in IPv6
    /// clothing of the same breadth), which would turn the guard off rather than open a
    /// hole in it.
    ///
    /// ```
    /// use replaysafe_http::SsrfPolicy;
    ///
    /// let policy = SsrfPolicy::default().allow("127.0.0.0/8")?.allow("airflow.internal")?;
    /// assert!(policy.check("anything.example", "127.0.0.9".parse()?).is_ok());
    /// assert!(policy.check("airflow.internal", "10.1.2.3".parse()?).is_ok());
    /// assert!(SsrfPolicy::default().allow("127.0.0.0/33").is_err());
    /// assert!(SsrfPolicy::default().allow("*.internal").is_err());
    /// assert!(SsrfPolicy::default().allow("0.0.0.0/0").is_err());
    /// assert!(SsrfPolicy::default().allow("::/0").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allow(self, entry: &str) -> Result<Self, InvalidAllowEntry> {
        let invalid = |problem| InvalidAllowEntry {
            entry: entry.to_owned(),
            problem,
        };
        let trimmed = entry.trim();
        if trimmed.contains('/') {
            let network = trimmed
                .parse::<IpNetwork>()
                .map_err(|_| invalid("not a network such as 10.0.0.0/8 or fd12:3456::/32"))?;
            if network.is_catch_all() {
                return Err(invalid(
                    "a catch-all network would turn the SSRF guard off: allow a host, or a network \
                     of at least /8 for IPv4 and /32 for IPv6",
                ));
            }
            return Ok(self.allow_network(network));
        }
        let bare = trimmed
            .strip_prefix('[')
            .and_then(|host| host.strip_suffix(']'))
            .unwrap_or(trimmed);
        let is_address = bare.parse::<IpAddr>().is_ok();
        let is_name = !bare.is_empty()
            && bare.len() <= 253
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !(is_address || is_name) {
            return Err(invalid(
                "not a host name, an IP address or a network such as 10.0.0.0/8",
            ));
        }
        Ok(self.allow_host(trimmed))
    }

    /// The hosts allowed explicitly.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }

    /// The networks allowed explicitly.
    pub fn allowed_networks(&self) -> &[IpNetwork] {
        &self.allowed_networks
    }

    fn allows_host(&self, host: &str) -> bool {
        !self.allowed_hosts.is_empty()
            && self
                .allowed_hosts
                .iter()
                .any(|allowed| *allowed == normalize_host(host))
    }

    /// Whether `host`, having resolved to `address`, may be connected to.
    pub fn check(&self, host: &str, address: IpAddr) -> Result<(), SsrfRefusal> {
        let Some(class) = AddressClass::of(address) else {
            return Ok(());
        };
        if self.allows_host(host)
            || self
                .allowed_networks
                .iter()
                .any(|network| network.contains(address))
        {
            return Ok(());
        }
        Err(SsrfRefusal {
            host: normalize_host(host),
            address,
            class,
        })
    }

    /// Checks a URL whose host is an IP literal (including the decimal, octal and hex
    /// spellings that URL parsing turns into one, such as `http://2130706433/`).
    /// Host names pass here; [`SsrfResolver`] checks what they resolve to.
    pub fn check_url(&self, url: &Url) -> Result<(), SsrfRefusal> {
        let address = match url.host() {
            Some(Host::Ipv4(address)) => IpAddr::V4(address),
            Some(Host::Ipv6(address)) => IpAddr::V6(address),
            Some(Host::Domain(_)) | None => return Ok(()),
        };
        self.check(url.host_str().unwrap_or_default(), address)
    }

    /// Keeps the addresses `host` may connect to; refuses when none is left.
    pub fn filter(
        &self,
        host: &str,
        addresses: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, SsrfRefusal> {
        let mut first_refusal = None;
        let allowed: Vec<SocketAddr> = addresses
            .into_iter()
            .filter(|address| match self.check(host, address.ip()) {
                Ok(()) => true,
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                    false
                }
            })
            .collect();
        match first_refusal {
            Some(refusal) if allowed.is_empty() => Err(refusal),
            _ => Ok(allowed),
        }
    }

    /// A DNS resolver for `reqwest::ClientBuilder::dns_resolver` that applies this policy.
    pub fn resolver(&self) -> SsrfResolver {
        SsrfResolver {
            policy: Arc::new(self.clone()),
        }
    }
}

fn normalize_host(host: &str) -> String {
    host.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Resolves host names with the system resolver and drops the addresses an
/// [`SsrfPolicy`] refuses; a name left with no address fails with an [`SsrfRefusal`].
///
/// reqwest connects only to the addresses a resolver returns, so the check holds for
/// the connection actually made. reqwest does not call a resolver for IP-literal hosts:
/// check those with [`SsrfPolicy::check_url`]. Behind a proxy the resolver sees the
/// proxy's name, not the target's: use it with `no_proxy()`.
#[derive(Clone, Debug)]
pub struct SsrfResolver {
    policy: Arc<SsrfPolicy>,
}

impl Resolve for SsrfResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str();
            let resolved = tokio::net::lookup_host((host, 0)).await?;
            let allowed = policy.filter(host, resolved)?;
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// A connection the [`SsrfPolicy`] refused; nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SsrfRefusal {
    host: String,
    address: IpAddr,
    class: AddressClass,
}

impl fmt::Display for SsrfRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host == normalize_host(&self.address.to_string()) {
            write!(f, "{} is {}", self.address, self.class.with_article())?;
        } else {
            write!(
                f,
                "{} resolves to {}, {}",
                self.host,
                self.address,
                self.class.with_article()
            )?;
        }
        f.write_str(
            " and the SSRF policy refuses it (allow it explicitly with SsrfPolicy::allow_host or allow_network)",
        )
    }
}

impl SsrfRefusal {
    /// The host as written in the URL.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The refused address.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// Why the address was refused.
    pub fn class(&self) -> AddressClass {
        self.class
    }

    /// Finds a refusal in an error's chain of sources, as reqwest reports one from
    /// [`SsrfResolver`] (a connect error whose cause is the refusal).
    pub fn find_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a SsrfRefusal> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(refusal) = error.downcast_ref::<SsrfRefusal>() {
                return Some(refusal);
            }
            current = error.source();
        }
        None
    }
}

/// Address ranges that are not globally reachable, which the SSRF guard refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressClass {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
    Private,
    /// `169.254.0.0/16` (cloud metadata at 169.254.169.254), `fe80::/10`.
    LinkLocal,
    /// `100.64.0.0/10`, shared address space of carrier-grade NAT.
    SharedCgnat,
    /// `fc00::/7`, and the deprecated site-local `fec0::/10`.
    UniqueLocal,
    /// `::ffff:0:0/96` and the deprecated IPv4-compatible `::/96`: IPv4 in IPv6 clothing.
    Ipv4Mapped,
    /// An IPv6 translation or tunnel address: NAT64 `64:ff9b::/96` or 6to4 `2002::/16`
    /// carrying a refused IPv4 address, and every local-use NAT64 `64:ff9b:1::/48` or
    /// Teredo `2001::/32` address.
    Translated,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`.
    Documentation,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `192.0.0.0/24`, `192.88.99.0/24`, `240.0.0.0/4` (with broadcast), `100::/64`.
    Reserved,
}

impl AddressClass {
    /// The class of `address`, or `None` for a globally reachable address.
    ///
    /// ```
    /// use replaysafe_http::AddressClass;
    /// assert_eq!(AddressClass::of("169.254.169.254".parse()?), Some(AddressClass::LinkLocal));
    /// assert_eq!(AddressClass::of("::ffff:127.0.0.1".parse()?), Some(AddressClass::Ipv4Mapped));
    /// assert_eq!(AddressClass::of("1.1.1.1".parse()?), None);
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn of(address: IpAddr) -> Option<AddressClass> {
        match address {
            IpAddr::V4(address) => Self::of_v4(address),
            IpAddr::V6(address) => Self::of_v6(address),
        }
    }

    fn of_v4(address: Ipv4Addr) -> Option<AddressClass> {
        let [a, b, c, _] = address.octets();
        Some(match (a, b, c) {
            (0, _, _) => AddressClass::Unspecified,
            (10, _, _) | (172, 16..=31, _) | (192, 168, _) => AddressClass::Private,
            (100, 64..=127, _) => AddressClass::SharedCgnat,
            (127, _, _) => AddressClass::Loopback,
            (169, 254, _) => AddressClass::LinkLocal,
            (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => AddressClass::Documentation,
            (198, 18..=19, _) => AddressClass::Benchmarking,
            (192, 0, 0) | (192, 88, 99) | (240..=255, _, _) => AddressClass::Reserved,
            (224..=239, _, _) => AddressClass::Multicast,
            _ => return None,
        })
    }

    fn of_v6(address: Ipv6Addr) -> Option<AddressClass> {
        let segments = address.segments();
        if address.is_unspecified() {
            return Some(AddressClass::Unspecified);
        }
        if address.is_loopback() {
            return Some(AddressClass::Loopback);
        }
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
        if segments[..5] == [0; 5] && (segments[5] == 0xffff || segments[5] == 0) {
            return Some(AddressClass::Ipv4Mapped);
        }
        let embedded_refused = |v4: Ipv4Addr| Self::of_v4(v4).map(|_| AddressClass::Translated);
        match segments {
            // NAT64 well-known prefix: the last 32 bits are the IPv4 address.
            [0x64, 0xff9b, 0, 0, 0, 0, high, low] => return embedded_refused(v4_from(high, low)),
            // Local-use NAT64 prefix: translates into the operator's own network.
            [0x64, 0xff9b, 0x1, ..] => return Some(AddressClass::Translated),
            // 6to4: bits 16..48 are the IPv4 address.
            [0x2002, high, low, ..] => return embedded_refused(v4_from(high, low)),
            // Teredo tunnels to wherever the relay decides: refused whatever it carries.
            [0x2001, 0, ..] => return Some(AddressClass::Translated),
            [0x2001, 0x2, 0, ..] => return Some(AddressClass::Benchmarking),
            [0x2001, 0xdb8, ..] => return Some(AddressClass::Documentation),
            [0x100, 0, 0, 0, ..] => return Some(AddressClass::Reserved),
            _ => {}
        }
        match segments[0] {
            0xfc00..=0xfdff | 0xfec0..=0xfeff => Some(AddressClass::UniqueLocal),
            0xfe80..=0xfebf => Some(AddressClass::LinkLocal),
            0xff00..=0xffff => Some(AddressClass::Multicast),
            _ => None,
        }
    }

    /// A short name: `loopback`, `private`, `link-local`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::SharedCgnat => "shared (CGNAT)",
            AddressClass::UniqueLocal => "unique-local",
            AddressClass::Ipv4Mapped => "IPv4-mapped",
            AddressClass::Translated => "translated (NAT64, 6to4 or Teredo)",
            AddressClass::Multicast => "multicast",
            AddressClass::Documentation => "documentation",
            AddressClass::Benchmarking => "benchmarking",
            AddressClass::Reserved => "reserved",
        }
    }

    fn with_article(self) -> String {
        let article = match self {
            AddressClass::Unspecified | AddressClass::Ipv4Mapped => "an",
            _ => "a",
        };
        format!("{article} {} address", self.as_str())
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn v4_from(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// An IP network in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a
/// network of one (`127.0.0.1` is `127.0.0.1/32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNetwork {
    address: IpAddr,
    prefix: u8,
}

impl IpNetwork {
    /// The network of `address` with `prefix` leading bits; `None` when the prefix is
    /// longer than the address.
    pub fn new(address: IpAddr, prefix: u8) -> Option<Self> {
        let bits = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits).then_some(IpNetwork { address, prefix })
    }

    /// Whether `address` lies in this network (an IPv4 network holds no IPv6 address).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.address, address) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

/// The shortest prefixes an allow-list may open: /8 for IPv4, /32 for IPv6.
const NARROWEST_V4: u8 = 8;
const NARROWEST_V6: u8 = 32;

/// IPv6 prefixes of 96 bits whose last 32 bits are an IPv4 address: mapped
/// (`::ffff:0:0/96`), compatible (`::/96`) and NAT64 (`64:ff9b::/96`).
const IPV4_IN_IPV6: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
    Ipv6Addr::UNSPECIFIED,
    Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
];

impl IpNetwork {
    /// Whether the network is too broad to be an exception to the SSRF guard: an IPv4
    /// prefix shorter than /8 (`0.0.0.0/0`), an IPv6 prefix shorter than /32 (`::/0`), or an
    /// IPv6 network that holds IPv4 addresses mapped, compatible or translated (NAT64) as
    /// broadly (`::ffff:0:0/96`, `::/32`, `::ffff:0.0.0.0/100`).
    ///
    /// ```
    /// use replaysafe_http::IpNetwork;
    /// let catch_all = |text: &str| text.parse::<IpNetwork>().unwrap().is_catch_all();
    /// assert!(catch_all("0.0.0.0/0") && catch_all("10.0.0.0/7") && catch_all("::/0"));
    /// assert!(catch_all("fd00::/8") && catch_all("::ffff:0:0/96"));
    /// assert!(!catch_all("10.0.0.0/8") && !catch_all("fd12:3456::/32") && !catch_all("::ffff:127.0.0.0/104"));
    /// ```
    pub fn is_catch_all(&self) -> bool {
        match self.address {
            IpAddr::V4(_) => self.prefix < NARROWEST_V4,
            IpAddr::V6(address) => {
                self.prefix < NARROWEST_V6
                    || IPV4_IN_IPV6.into_iter().any(|base| {
                        if self.prefix <= 96 {
                            // The network holds the whole /96, so every IPv4 address.
                            self.contains(IpAddr::V6(base))
                        } else {
                            let embedding = IpNetwork {
                                address: IpAddr::V6(base),
                                prefix: 96,
                            };
                            embedding.contains(IpAddr::V6(address))
                                && self.prefix - 96 < NARROWEST_V4
                        }
                    })
            }
        }
    }
}

impl fmt::Display for IpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// Why an allow-list entry given to [`SsrfPolicy::allow`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid allow-list entry {entry:?}: {problem}")]
pub struct InvalidAllowEntry {
    entry: String,
    problem: &'static str,
}

/// Why a network could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid network {0:?}: expected an address or address/prefix, such as 10.0.0.0/8 or fd12:3456::/32"
)]
pub struct InvalidNetwork(String);

impl FromStr for IpNetwork {
    type Err = InvalidNetwork;

    fn from_str(text: &str) -> Result<Self, InvalidNetwork> {
        let invalid = || InvalidNetwork(text.to_owned());
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| invalid())?;
        let prefix = match prefix {
            Some(prefix) if !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_digit()) => {
                prefix.parse().map_err(|_| invalid())?
            }
            Some(_) => return Err(invalid()),
            None if address.is_ipv4() => 32,
            None => 128,
        };
        IpNetwork::new(address, prefix).ok_or_else(invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(address: &str) -> Option<AddressClass> {
        AddressClass::of(address.parse().unwrap())
    }

    #[test]
    fn internal_ranges_are_classified() {
        use AddressClass::*;
        let cases = [
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.169.254", LinkLocal),
            ("100.64.0.1", SharedCgnat),
            ("100.127.255.255", SharedCgnat),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("255.255.255.255", Reserved),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("224.0.0.1", Multicast),
            ("192.0.2.1", Documentation),
            ("198.18.0.1", Benchmarking),
            ("::", Unspecified),
            ("::1", Loopback),
            ("fc00::1", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("fec0::1", UniqueLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("::ffff:127.0.0.1", Ipv4Mapped),
            ("::ffff:8.8.8.8", Ipv4Mapped),
            ("::127.0.0.1", Ipv4Mapped),
            ("64:ff9b::a9fe:a9fe", Translated),
            ("64:ff9b:1::1", Translated),
            ("2002:7f00:1::1", Translated),
            ("2001:db8::1", Documentation),
            ("ff02::1", Multicast),
            ("100::1", Reserved),
        ];
        for (address, expected) in cases {
            assert_eq!(class(address), Some(expected), "{address}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for address in [
            "1.1.1.1",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.0.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(class(address), None, "{address}");
        }
    }

    #[test]
    fn networks_parse_and_contain() {
        let network: IpNetwork = "10.20.0.0/16".parse().unwrap();
        assert!(network.contains("10.20.255.1".parse().unwrap()));
        assert!(!network.contains("10.21.0.1".parse().unwrap()));
        assert!(!network.contains("::ffff:10.20.0.1".parse().unwrap()));
        let single: IpNetwork = "127.0.0.1".parse().unwrap();
        assert_eq!(single.to_string(), "127.0.0.1/32");
        assert!(single.contains("127.0.0.1".parse().unwrap()));
        assert!(!single.contains("127.0.0.2".parse().unwrap()));
        let everything: IpNetwork = "0.0.0.0/0".parse().unwrap();
        assert!(everything.contains("10.0.0.1".parse().unwrap()));
        let v6: IpNetwork = "[::1]".parse().unwrap();
        assert!(v6.contains("::1".parse().unwrap()));
        let ula: IpNetwork = "fd00::/8".parse().unwrap();
        assert!(ula.contains("fd12::1".parse().unwrap()));
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0/8",
            "host/8",
            "1.2.3.4/-1",
        ] {
            assert!(bad.parse::<IpNetwork>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_lists_open_hosts_and_networks_only() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let policy = SsrfPolicy::default();
        let refusal = policy.check("localhost", loopback).unwrap_err();
        assert_eq!(refusal.class(), AddressClass::Loopback);
        assert_eq!(
            refusal.to_string(),
            "localhost resolves to 127.0.0.1, a loopback address and the SSRF policy refuses it \
             (allow it explicitly with SsrfPolicy::allow_host or allow_network)"
        );
        let policy = SsrfPolicy::default().allow_host("LocalHost.");
        assert!(policy.check("localhost", loopback).is_ok());
        assert!(policy.check("other.example", loopback).is_err());
        let policy = SsrfPolicy::default().allow_host("[::1]");
        assert!(policy.check("[::1]", "::1".parse().unwrap()).is_ok());
        let policy = SsrfPolicy::default().allow_network("127.0.0.1/32".parse().unwrap());
        assert!(policy.check("anything.example", loopback).is_ok());
        assert!(
            policy
                .check("anything.example", "127.0.0.2".parse().unwrap())
                .is_err()
        );
    }

    #[test]
    fn catch_all_networks_are_refused_naming_the_entry() {
        for entry in [
            "0.0.0.0/0",
            "::/0",
            "10.0.0.0/7",
            "128.0.0.0/1",
            " 0.0.0.0/0 ",
            "fd00::/8",
            "2000::/3",
            "fe80::/31",
            "::/32",
            "::/96",
            "::ffff:0:0/96",
            "::ffff:0.0.0.0/100",
            "64:ff9b::/96",
            "64:ff9b::/103",
            "[::]/0",
        ] {
            let error = SsrfPolicy::default().allow(entry).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!(
                    "invalid allow-list entry {entry:?}: a catch-all network"
                )),
                "{error}"
            );
        }
        for entry in [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.169.254/32",
            "fd12:3456::/32",
            "fe80::/32",
            "::1/128",
            "::ffff:127.0.0.0/104",
            "64:ff9b::a00:0/104",
            "0.0.0.0",
            "::",
        ] {
            assert!(SsrfPolicy::default().allow(entry).is_ok(), "{entry}");
        }
        // What a catch-all would have let through: every internal address.
        let wide = SsrfPolicy::default().allow_network("0.0.0.0/0".parse().unwrap());
        assert!(
            wide.check("metadata", "169.254.169.254".parse().unwrap())
                .is_ok()
        );
    }

    #[test]
    fn resolved_answers_are_filtered_not_trusted() {
        let policy = SsrfPolicy::default();
        let public: SocketAddr = "93.184.216.34:0".parse().unwrap();
        let metadata: SocketAddr = "169.254.169.254:0".parse().unwrap();
        // A rebinding answer mixing a public and an internal address keeps only the public one.
        assert_eq!(
            policy.filter("rebind.example", [metadata, public]).unwrap(),
            vec![public]
        );
        let refusal = policy.filter("rebind.example", [metadata]).unwrap_err();
        assert_eq!(refusal.address(), metadata.ip());
        assert_eq!(refusal.host(), "rebind.example");
        assert!(policy.filter("nothing.example", []).unwrap().is_empty());
    }

    #[test]
    fn literal_hosts_in_any_spelling_are_refused() {
        let policy = SsrfPolicy::default();
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f000001/",
            "http://0x7f.0.0.1/",
            "http://127.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::1]:8080/",
        ] {
            let parsed = Url::parse(url).unwrap();
            assert!(
                policy.check_url(&parsed).is_err(),
                "{url} parsed as {parsed}"
            );
        }
        assert!(
            policy
                .check_url(&Url::parse("https://hooks.example/x").unwrap())
                .is_ok()
        );
    }

    #[test]
    fn refusals_are_found_in_error_chains() {
        #[derive(Debug, thiserror::Error)]
        #[error("connecting")]
        struct Outer(#[source] Box<dyn std::error::Error + Send + Sync>);

        let refusal = SsrfPolicy::default()
            .check("10.0.0.1", "10.0.0.1".parse().unwrap())
            .unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "10.0.0.1 is a private address and the SSRF policy refuses it \
             (allow it explicitly with SsrfPolicy::allow_host or allow_network)"
        );
        let outer = Outer(Box::new(refusal.clone()));
        assert_eq!(SsrfRefusal::find_in(&outer), Some(&refusal));
        assert_eq!(SsrfRefusal::find_in(&std::fmt::Error), None);
    }
}
