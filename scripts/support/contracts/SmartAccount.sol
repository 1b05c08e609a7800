// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

// A smart-contract account as OpenZeppelin Contracts 5 builds one (the pattern of its docs and
// Wizard): an ERC-4337 `Account` owned by one EOA (`SignerECDSA`), answering ERC-1271
// `isValidSignature` through ERC-7739, the replay-safe scheme smart wallets use: the owner signs
// the personal_sign hash nested in an EIP-712 `PersonalSign` under THIS account's domain, so one
// owner's signature for account A can never be replayed as account B's.
//
// Only the tests use these contracts (scripts/support/evm-contracts.ts compiles them with solc-js from npm and
// deploys them on a local anvil chain); nothing here is deployed anywhere.

import {Account} from "@openzeppelin/contracts/account/Account.sol";
import {Clones} from "@openzeppelin/contracts/proxy/Clones.sol";
import {Initializable} from "@openzeppelin/contracts/proxy/utils/Initializable.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ERC7739} from "@openzeppelin/contracts/utils/cryptography/signers/draft-ERC7739.sol";
import {SignerECDSA} from "@openzeppelin/contracts/utils/cryptography/signers/SignerECDSA.sol";

contract SmartAccount is Account, EIP712, ERC7739, SignerECDSA, Initializable {
    /// The implementation behind every clone; it has no owner and can never get one.
    constructor() EIP712("SmartAccount", "1") SignerECDSA(address(0)) {
        _disableInitializers();
    }

    function initialize(address owner) external initializer {
        _setSigner(owner);
    }

    /// Owner rotation: the account itself (a call it makes, or its ERC-4337 entry point) hands it
    /// to a new key. Signatures of the old owner stop being valid from that block on.
    function rotateSigner(address newOwner) external onlyEntryPointOrSelf {
        _setSigner(newOwner);
    }
}

/// Deploys accounts at addresses known in advance (CREATE2 clones), which is what lets a wallet
/// sign before its account exists: ERC-6492 wraps the signature with this factory's calldata.
contract SmartAccountFactory {
    address public immutable implementation = address(new SmartAccount());

    function accountAddress(address owner, bytes32 salt) public view returns (address) {
        return Clones.predictDeterministicAddress(implementation, _salt(owner, salt));
    }

    /// Idempotent, as ERC-6492 factories must be: an existing account is returned as it is.
    function createAccount(address owner, bytes32 salt) external returns (address account) {
        account = accountAddress(owner, salt);
        if (account.code.length == 0) {
            Clones.cloneDeterministic(implementation, _salt(owner, salt));
            SmartAccount(payable(account)).initialize(owner);
        }
    }

    /// The owner is part of the salt, so nobody can deploy "your" address with another owner.
    function _salt(address owner, bytes32 salt) private pure returns (bytes32) {
        return keccak256(abi.encode(owner, salt));
    }
}
